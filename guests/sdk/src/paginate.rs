//! Following page tokens (`NextToken`, `marker`, `next_page`...) to the end of a list.
//!
//! ```
//! use wasm_ccm_guest::paginate::{Page, collect};
//!
//! // A cloud answering three pages.
//! let pages = [(vec![1, 2], Some("b")), (vec![3], Some("c")), (vec![4], None)];
//! let all = collect(|token| {
//!     let index = match token {
//!         None => 0,
//!         Some("b") => 1,
//!         Some(_) => 2,
//!     };
//!     let (items, next) = pages[index].clone();
//!     Ok::<_, String>(Page { items, next: next.map(str::to_owned) })
//! }, |message| message)
//! .unwrap();
//! assert_eq!(all, [1, 2, 3, 4]);
//! ```

/// One page of a list: its items and the token of the next page, if any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page<T> {
    /// The items of this page.
    pub items: Vec<T>,
    /// The next page's token; `None` (or empty) on the last page.
    pub next: Option<String>,
}

/// Most pages read before giving up: a cloud that answers tokens forever cannot hold
/// the provider (the host's call deadline would end it anyway, with less to say).
pub const MAX_PAGES: usize = 1000;

/// Calls `fetch` with `None`, then with each page's `next` token, until a page has
/// none, and returns every item in order. `error` turns a complaint (too many pages,
/// a token repeated) into the caller's error type.
pub fn collect<T, E>(
    mut fetch: impl FnMut(Option<&str>) -> Result<Page<T>, E>,
    error: impl Fn(String) -> E,
) -> Result<Vec<T>, E> {
    let mut items = Vec::new();
    let mut token: Option<String> = None;
    for _ in 0..MAX_PAGES {
        let page = fetch(token.as_deref())?;
        items.extend(page.items);
        match page.next.filter(|next| !next.is_empty()) {
            None => return Ok(items),
            Some(next) if token.as_deref() == Some(next.as_str()) => {
                return Err(error(format!(
                    "the cloud answered the page token {next:?} again; stopping"
                )));
            }
            Some(next) => token = Some(next),
        }
    }
    Err(error(format!("more than {MAX_PAGES} pages; stopping")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repeated_token_or_endless_pages_stop() {
        let same = collect(
            |_| {
                Ok::<_, String>(Page {
                    items: vec![1],
                    next: Some("t".into()),
                })
            },
            |m| m,
        );
        assert!(same.unwrap_err().contains("again"));
        let mut n = 0u64;
        let endless = collect(
            |_| {
                n += 1;
                Ok::<_, String>(Page {
                    items: Vec::<u8>::new(),
                    next: Some(n.to_string()),
                })
            },
            |m| m,
        );
        assert!(endless.unwrap_err().contains("more than 1000 pages"));
        let empty_token_ends = collect(
            |_| {
                Ok::<_, String>(Page {
                    items: vec![1],
                    next: Some(String::new()),
                })
            },
            |m| m,
        );
        assert_eq!(empty_token_ends.unwrap(), [1]);
    }
}
