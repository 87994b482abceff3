//! Reading AWS Query-protocol XML answers: small helpers over `roxmltree`, matching
//! elements by local name (the answers carry a default namespace).

pub use roxmltree::{Document, Node};

/// Parses an answer.
pub fn parse(text: &str) -> Result<Document<'_>, String> {
    Document::parse(text).map_err(|e| format!("the answer is not XML: {e}"))
}

/// The first child element named `name`.
pub fn child<'a, 'i>(node: Node<'a, 'i>, name: &str) -> Option<Node<'a, 'i>> {
    node.children()
        .find(|n| n.is_element() && n.tag_name().name() == name)
}

/// The text of the child element at `path` (`a/b/c`), or "" when absent.
pub fn text(node: Node<'_, '_>, path: &str) -> String {
    let mut current = node;
    for name in path.split('/') {
        match child(current, name) {
            Some(next) => current = next,
            None => return String::new(),
        }
    }
    current.text().unwrap_or_default().trim().to_owned()
}

/// The list entries of the child `list` (EC2's `<item>`, ELB's `<member>`).
pub fn items<'a, 'i: 'a>(
    node: Node<'a, 'i>,
    list: &str,
) -> impl Iterator<Item = Node<'a, 'i>> + 'a {
    child(node, list)
        .into_iter()
        .flat_map(|l| l.children())
        .filter(|n| n.is_element() && matches!(n.tag_name().name(), "item" | "member"))
}

/// The first element named `name` anywhere below `node`.
pub fn find<'a, 'i>(node: Node<'a, 'i>, name: &str) -> Option<Node<'a, 'i>> {
    node.descendants()
        .find(|n| n.is_element() && n.tag_name().name() == name)
}

/// A `tagSet` (EC2: `key`/`value`) or `Tags` (ELB: `Key`/`Value`) as pairs.
pub fn tags(node: Node<'_, '_>, list: &str) -> Vec<(String, String)> {
    items(node, list)
        .map(|t| {
            let key = [text(t, "key"), text(t, "Key")].concat();
            let value = [text(t, "value"), text(t, "Value")].concat();
            (key, value)
        })
        .collect()
}
