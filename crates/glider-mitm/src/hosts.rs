//! Which hosts Glider decrypts (`HostMatcher`): exact names and `*.example.com`
//! patterns from `mitm.hosts`, compared without case and without a trailing dot.

/// The decrypt list, fixed at start (`mitm.hosts` is restart-only).
#[derive(Debug, Clone, Default)]
pub struct HostMatcher {
    exact: Vec<String>,
    /// Suffixes with their leading dot (`.example.com` for `*.example.com`).
    suffixes: Vec<String>,
}

impl HostMatcher {
    /// Build from config entries. `*.example.com` matches every subdomain of
    /// example.com at any depth, but not example.com itself (list both for both).
    pub fn new<S: AsRef<str>>(hosts: &[S]) -> HostMatcher {
        let mut matcher = HostMatcher::default();
        for host in hosts {
            let host = normalize(host.as_ref());
            match host.strip_prefix('*') {
                Some(suffix) if suffix.starts_with('.') => matcher.suffixes.push(suffix.to_owned()),
                _ => matcher.exact.push(host),
            }
        }
        matcher
    }

    /// Whether `host` (no port) is to be decrypted.
    pub fn matches(&self, host: &str) -> bool {
        let host = normalize(host);
        self.exact.contains(&host)
            || self
                .suffixes
                .iter()
                .any(|s| host.len() > s.len() && host.ends_with(s.as_str()))
    }
}

fn normalize(host: &str) -> String {
    let host = host.trim().trim_end_matches('.');
    // An IPv6 literal arrives as `[::1]`.
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    host.to_ascii_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_and_wildcard() {
        let m = HostMatcher::new(&["api.anthropic.com", "*.openai.com", "[::1]"]);
        assert!(m.matches("api.anthropic.com"));
        assert!(m.matches("API.Anthropic.com."));
        assert!(!m.matches("anthropic.com"));
        assert!(!m.matches("xapi.anthropic.com"));
        assert!(m.matches("api.openai.com"));
        assert!(m.matches("a.b.openai.com"));
        assert!(!m.matches("openai.com"));
        assert!(!m.matches("notopenai.com"));
        assert!(m.matches("::1"));
        assert!(!HostMatcher::new::<&str>(&[]).matches("api.anthropic.com"));
    }
}
