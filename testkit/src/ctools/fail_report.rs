//! The `KEEPALLOC_FAIL` exit report: finding an allocation site by where its stack starts.

/// From a `KEEPALLOC_FAIL` exit report: the hash of the site with `hits` hits whose stack
/// starts in `function` (`None` when there is none).
pub fn site_in(report: &str, function: &str, hits: u64) -> Option<String> {
    let mut site = None;
    for line in report.lines() {
        if let Some(rest) = line.trim().strip_prefix("site ") {
            let words: Vec<&str> = rest.split_whitespace().collect();
            site = (words.get(2) == Some(&hits.to_string().as_str())).then(|| words[0].to_owned());
        } else if line.trim().starts_with("#0 ")
            && line.contains(function)
            && let Some(site) = site.take()
        {
            return Some(site);
        }
    }
    None
}
