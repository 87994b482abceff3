//! Reading moto's XML answers: the texts of elements by name or path.

/// Every text of elements named `name` (local name), in document order.
pub fn texts(xml: &str, name: &str) -> Vec<String> {
    let doc = roxmltree::Document::parse(xml).unwrap_or_else(|e| panic!("{e}: {xml}"));
    doc.descendants()
        .filter(|n| n.is_element() && n.tag_name().name() == name)
        .map(|n| n.text().unwrap_or_default().trim().to_owned())
        .collect()
}

/// The text at `path` in `xml`: below the first element named `path[0]` that has
/// them, its children named by the rest; "" when there is none.
pub fn text_at(xml: &str, path: &[&str]) -> String {
    let doc = roxmltree::Document::parse(xml).unwrap_or_else(|e| panic!("{e}: {xml}"));
    doc.descendants()
        .filter(|n| n.is_element() && n.tag_name().name() == path[0])
        .find_map(|start| path[1..].iter().try_fold(start, |n, name| child(n, name)))
        .and_then(|n| n.text())
        .unwrap_or_default()
        .trim()
        .to_owned()
}

/// The first text of an element named `name`.
pub fn text(xml: &str, name: &str) -> String {
    texts(xml, name)
        .into_iter()
        .next()
        .unwrap_or_else(|| panic!("no <{name}> in {xml}"))
}

fn child<'a, 'i>(n: roxmltree::Node<'a, 'i>, name: &str) -> Option<roxmltree::Node<'a, 'i>> {
    n.children()
        .find(|c| c.is_element() && c.tag_name().name() == name)
}

pub(crate) fn child_text(n: roxmltree::Node<'_, '_>, name: &str) -> String {
    child(n, name)
        .and_then(|c| c.text())
        .unwrap_or_default()
        .trim()
        .to_owned()
}

pub(crate) fn child_items<'a, 'i>(
    n: roxmltree::Node<'a, 'i>,
    name: &str,
) -> Vec<roxmltree::Node<'a, 'i>> {
    child(n, name)
        .map(|l| l.children().filter(|c| c.is_element()).collect())
        .unwrap_or_default()
}
