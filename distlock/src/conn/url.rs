//! Redis URLs as messages show them.

/// The URL without its password, for messages.
pub(crate) fn redact(url: &str) -> String {
    let Some(scheme_end) = url.find("://").map(|i| i + 3) else {
        return url.to_owned();
    };
    // `redis+unix:///path?pass=..` carries the password in the query.
    if let Some(query) = url.find('?') {
        let params: Vec<String> = url[query + 1..]
            .split('&')
            .map(|param| match param.split_once('=') {
                Some((name, _)) if name == "pass" || name == "password" => format!("{name}=***"),
                _ => param.to_owned(),
            })
            .collect();
        return format!("{}?{}", redact(&url[..query]), params.join("&"));
    }
    let rest = &url[scheme_end..];
    let authority_end = rest.find('/').unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => {
            let userinfo = &rest[..at];
            let user = userinfo.split(':').next().unwrap_or("");
            let masked = if userinfo.contains(':') {
                format!("{user}:***")
            } else {
                "***".to_owned()
            };
            format!("{}{}@{}", &url[..scheme_end], masked, &rest[at + 1..])
        }
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::redact;

    #[test]
    fn passwords_never_reach_messages() {
        assert_eq!(redact("redis://u:secret@h:1/0"), "redis://u:***@h:1/0");
        assert_eq!(redact("redis://:secret@h:1"), "redis://:***@h:1");
        assert_eq!(redact("rediss://secret@h"), "rediss://***@h");
        assert_eq!(redact("redis://h:1/0"), "redis://h:1/0");
        assert_eq!(redact("h:1"), "h:1");
        assert_eq!(
            redact("redis+unix:///tmp/r.sock?db=1&pass=secret"),
            "redis+unix:///tmp/r.sock?db=1&pass=***"
        );
        assert_eq!(
            redact("redis://u:secret@h/?protocol=resp3"),
            "redis://u:***@h/?protocol=resp3"
        );
    }
}
