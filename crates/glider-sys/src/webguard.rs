//! The browser rules Glider's HTTP doors share (gateway, `/mcp`, dashboard): which `Host`
//! names a loopback-bound port answers (so a DNS-rebinding page cannot reach it), which
//! `Origin` counts as the port's own (so another site's page cannot use it), and a
//! constant-time token comparison.

/// `host` (a `Host` header value, with or without a port) names this machine's loopback
/// interface: `localhost`, `*.localhost`, or a loopback IP address.
pub fn is_loopback_host(host: &str) -> bool {
    let name = match host.strip_prefix('[') {
        Some(rest) => rest.split(']').next().unwrap_or(""),
        None => host.rsplit_once(':').map_or(host, |(name, _)| name),
    };
    let name = name.to_ascii_lowercase();
    name == "localhost"
        || name.ends_with(".localhost")
        || name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// Whether a browser's `Origin` is this port's own: `http(s)://<Host>`. Anything else —
/// another site, `null` (sandboxed frames, `file:` pages), or no `Host` to compare with —
/// is cross-site. An absent `Origin` (SDKs, CLIs, curl) is the caller's to allow.
pub fn same_origin(origin: &str, host: Option<&str>) -> bool {
    let Some(host) = host else {
        return false;
    };
    let origin = origin.to_ascii_lowercase();
    let host = host.to_ascii_lowercase();
    origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"))
        .is_some_and(|rest| rest == host)
}

/// Compare without an early exit, so timing does not reveal a prefix.
pub fn tokens_equal(given: &str, expected: &str) -> bool {
    let (a, b) = (given.as_bytes(), expected.as_bytes());
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_host_names() {
        for host in [
            "127.0.0.1:8081",
            "localhost:8081",
            "LOCALHOST",
            "[::1]:8081",
            "127.0.0.2",
            "app.localhost:1",
        ] {
            assert!(is_loopback_host(host), "{host}");
        }
        for host in [
            "evil.example:8081",
            "10.0.0.1:8081",
            "localhost.evil.example",
            "[::2]:1",
            "",
        ] {
            assert!(!is_loopback_host(host), "{host}");
        }
    }

    #[test]
    fn origins() {
        let host = Some("127.0.0.1:8081");
        assert!(same_origin("http://127.0.0.1:8081", host));
        assert!(same_origin("HTTPS://127.0.0.1:8081", host));
        assert!(!same_origin(
            "http://127.0.0.1:8081",
            Some("localhost:8081")
        ));
        assert!(!same_origin("null", host));
        assert!(!same_origin("http://evil.example", host));
        assert!(!same_origin("http://127.0.0.1:8081.evil.example", host));
        assert!(!same_origin("http://127.0.0.1:8081", None));
    }

    #[test]
    fn token_comparison() {
        assert!(tokens_equal("abc", "abc"));
        assert!(!tokens_equal("abd", "abc"));
        assert!(!tokens_equal("ab", "abc"));
    }
}
