//! Making clients trust Glider's CA: the Linux system store (`glider ca install`), a
//! combined bundle (system roots + Glider's CA) for clients whose CA variable replaces
//! the system roots (Codex's `CODEX_CA_CERTIFICATE`, OpenSSL's `SSL_CERT_FILE`), and
//! the environment `glider run` gives one child process.

use std::path::{Path, PathBuf};

use glider_sys::atomicfile;

use crate::Authority;
use crate::hosts::HostMatcher;

/// Debian's directory for locally added CA certificates.
pub const SYSTEM_TRUST_DIR: &str = "/usr/local/share/ca-certificates";
/// Name of Glider's CA in that directory (`update-ca-certificates` wants `.crt`).
pub const SYSTEM_TRUST_NAME: &str = "glider-mitm-ca.crt";
/// File name of the combined bundle, next to `ca.crt`.
pub const BUNDLE_FILE: &str = "ca-bundle.pem";

/// System CA bundles, in the order Linux distributions put them.
const SYSTEM_BUNDLES: [&str; 4] = [
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/ca-bundle.pem",
    "/etc/ssl/cert.pem",
];

/// The exact commands that put `ca_cert` into the system trust store.
pub fn install_commands(ca_cert: &Path, trust_dir: &Path) -> Vec<String> {
    vec![
        format!(
            "install -m 0644 {} {}",
            ca_cert.display(),
            trust_dir.join(SYSTEM_TRUST_NAME).display()
        ),
        "update-ca-certificates".to_owned(),
    ]
}

/// Whether this process runs as root (Linux: the effective uid in /proc/self/status).
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|ids| ids.split_whitespace().nth(1).map(|e| e == "0"))
        })
        .unwrap_or(false)
}

/// Copy `ca_cert` into `trust_dir` and run `update-ca-certificates`. Returns what the
/// tool printed.
pub fn install(ca_cert: &Path, trust_dir: &Path) -> std::io::Result<String> {
    if !trust_dir.is_dir() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!(
                "{} does not exist: this is not a Debian-style system; add {} to your distribution's trust store by hand",
                trust_dir.display(),
                ca_cert.display()
            ),
        ));
    }
    let pem = std::fs::read(ca_cert)?;
    atomicfile::write(&trust_dir.join(SYSTEM_TRUST_NAME), &pem, 0o644)?;
    let output = std::process::Command::new("update-ca-certificates")
        .output()
        .map_err(|e| {
            std::io::Error::new(
                e.kind(),
                format!(
                    "cannot run update-ca-certificates ({e}); install the ca-certificates package"
                ),
            )
        })?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    if output.status.success() {
        Ok(text)
    } else {
        Err(std::io::Error::other(format!(
            "update-ca-certificates failed ({}): {text}",
            output.status
        )))
    }
}

/// Whether the system trusts the CA whose certificate is at `cert_path`: the anchor
/// [`install`] writes holds it, and so does the bundle clients read (`SSL_CERT_FILE` or
/// the system's), when there is one. Glider's own bundle beside the CA never counts: it
/// is what `glider run` hands one child, not what the system trusts.
pub fn system_trusts(cert_path: &Path) -> bool {
    let Ok(pem) = std::fs::read_to_string(cert_path) else {
        return false;
    };
    let anchor = Path::new(SYSTEM_TRUST_DIR).join(SYSTEM_TRUST_NAME);
    let bundle = base_bundle(&cert_path.with_file_name(BUNDLE_FILE));
    holds_certificate(&anchor, &pem) && bundle.is_none_or(|b| holds_certificate(&b, &pem))
}

/// Whether the PEM file at `path` (one certificate or a bundle) holds `cert_pem`.
pub fn holds_certificate(path: &Path, cert_pem: &str) -> bool {
    let body = |pem: &str| pem.lines().map(str::trim).collect::<String>();
    std::fs::read_to_string(path).is_ok_and(|text| body(&text).contains(&body(cert_pem)))
}

/// The CA bundle a client uses when no variable says otherwise: `SSL_CERT_FILE` when it
/// is set (and is not Glider's own bundle), else the distribution's bundle.
pub fn base_bundle(own: &Path) -> Option<PathBuf> {
    let from_env = std::env::var_os("SSL_CERT_FILE")
        .map(PathBuf::from)
        .filter(|p| p != own && p.is_file());
    from_env.or_else(|| {
        SYSTEM_BUNDLES
            .iter()
            .map(PathBuf::from)
            .find(|p| p.is_file())
    })
}

/// Write `<ca dir>/ca-bundle.pem`: the base bundle, any file `NODE_EXTRA_CA_CERTS`
/// already names, then Glider's CA. Returns its path.
pub fn write_bundle(authority: &Authority) -> std::io::Result<PathBuf> {
    let cert_path = authority.cert_path();
    let dir = cert_path
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default();
    let path = dir.join(BUNDLE_FILE);
    let mut text = String::new();
    let mut sources: Vec<PathBuf> = base_bundle(&path).into_iter().collect();
    if let Some(extra) = std::env::var_os("NODE_EXTRA_CA_CERTS").map(PathBuf::from)
        && extra != cert_path
        && extra != path
        && !sources.contains(&extra)
    {
        sources.push(extra);
    }
    for source in sources {
        if let Ok(pem) = std::fs::read_to_string(&source) {
            text.push_str(&pem);
            if !text.ends_with('\n') {
                text.push('\n');
            }
        }
    }
    text.push_str(authority.cert_pem());
    atomicfile::write(&path, text.as_bytes(), glider_sys::fileacl::PRIVATE_FILE)?;
    Ok(path)
}

/// The shell lines that make Node- and Codex-based CLIs trust Glider's CA.
pub fn env_lines(ca_cert: &Path, bundle: &Path) -> Vec<String> {
    vec![
        format!("export NODE_EXTRA_CA_CERTS={}", ca_cert.display()),
        format!("export CODEX_CA_CERTIFICATE={}", bundle.display()),
    ]
}

/// The variables `glider run` sets for one child: the proxy, loopback excluded from it,
/// and CA trust for Node (`NODE_EXTRA_CA_CERTS` adds to the built-in roots), Codex and
/// OpenSSL (`CODEX_CA_CERTIFICATE` and `SSL_CERT_FILE` replace them, so they get the
/// combined bundle). `REQUESTS_CA_BUNDLE` and `CURL_CA_BUNDLE` are pointed at the
/// bundle only when already set, since they would otherwise win over `SSL_CERT_FILE`.
/// `NO_PROXY` keeps the parent's entries except those that would send a decrypted host
/// around the proxy.
pub fn child_env(
    proxy_url: &str,
    ca_cert: &Path,
    bundle: &Path,
    hosts: &[String],
    lookup: impl Fn(&str) -> Option<String>,
) -> Vec<(String, String)> {
    let mut env = Vec::new();
    for name in ["HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"] {
        env.push((name.to_owned(), proxy_url.to_owned()));
    }
    let matcher = HostMatcher::new(hosts);
    let mut no_proxy = vec![
        "localhost".to_owned(),
        "127.0.0.1".to_owned(),
        "::1".to_owned(),
    ];
    for existing in [lookup("NO_PROXY"), lookup("no_proxy")]
        .into_iter()
        .flatten()
    {
        for entry in existing.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            if !bypasses(entry, hosts, &matcher) && !no_proxy.iter().any(|e| e == entry) {
                no_proxy.push(entry.to_owned());
            }
        }
    }
    let no_proxy = no_proxy.join(",");
    env.push(("NO_PROXY".to_owned(), no_proxy.clone()));
    env.push(("no_proxy".to_owned(), no_proxy));
    let node_ca = match lookup("NODE_EXTRA_CA_CERTS") {
        // Keep what the parent trusted: the bundle contains that file too.
        Some(existing) if !existing.is_empty() && Path::new(&existing) != ca_cert => bundle,
        _ => ca_cert,
    };
    env.push((
        "NODE_EXTRA_CA_CERTS".to_owned(),
        node_ca.display().to_string(),
    ));
    for name in ["CODEX_CA_CERTIFICATE", "SSL_CERT_FILE"] {
        env.push((name.to_owned(), bundle.display().to_string()));
    }
    for name in ["REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE"] {
        if lookup(name).is_some_and(|v| !v.is_empty()) {
            env.push((name.to_owned(), bundle.display().to_string()));
        }
    }
    env
}

/// Whether a `NO_PROXY` entry would exempt a decrypted host from the proxy.
fn bypasses(entry: &str, hosts: &[String], matcher: &HostMatcher) -> bool {
    if entry == "*" {
        return true;
    }
    let domain = entry
        .trim_start_matches("*.")
        .trim_start_matches('.')
        .to_ascii_lowercase();
    matcher.matches(&domain)
        || hosts.iter().any(|h| {
            let h = h.trim_start_matches("*.").to_ascii_lowercase();
            h == domain || h.ends_with(&format!(".{domain}"))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_certificate_is_found_inside_a_bundle_whatever_its_line_breaks() {
        let dir = tempfile::tempdir().expect("dir");
        let cert = "-----BEGIN CERTIFICATE-----\nAAAA\nBBBB\n-----END CERTIFICATE-----\n";
        let other = "-----BEGIN CERTIFICATE-----\nCCCC\n-----END CERTIFICATE-----\n";
        let bundle = dir.path().join("bundle.pem");
        std::fs::write(
            &bundle,
            format!("{other}\r\n{}", cert.replace('\n', "\r\n")),
        )
        .expect("write");
        assert!(holds_certificate(&bundle, cert));
        std::fs::write(&bundle, other).expect("write");
        assert!(!holds_certificate(&bundle, cert));
        assert!(!holds_certificate(&dir.path().join("missing.pem"), cert));
    }

    #[test]
    fn child_env_sets_proxy_and_trust_and_keeps_decrypted_hosts_proxied() {
        let hosts = vec!["api.anthropic.com".to_owned(), "*.openai.com".to_owned()];
        let parent = |name: &str| match name {
            "NO_PROXY" => Some("anthropic.com, internal.corp,*.openai.com,localhost".to_owned()),
            "REQUESTS_CA_BUNDLE" => Some("/etc/ssl/certs/ca-certificates.crt".to_owned()),
            _ => None,
        };
        let env = child_env(
            "http://127.0.0.1:8082",
            Path::new("/h/mitm/ca.crt"),
            Path::new("/h/mitm/ca-bundle.pem"),
            &hosts,
            parent,
        );
        let get = |name: &str| env.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str());
        assert_eq!(get("HTTPS_PROXY"), Some("http://127.0.0.1:8082"));
        assert_eq!(get("http_proxy"), Some("http://127.0.0.1:8082"));
        assert_eq!(
            get("NO_PROXY"),
            Some("localhost,127.0.0.1,::1,internal.corp")
        );
        assert_eq!(get("NODE_EXTRA_CA_CERTS"), Some("/h/mitm/ca.crt"));
        assert_eq!(get("CODEX_CA_CERTIFICATE"), Some("/h/mitm/ca-bundle.pem"));
        assert_eq!(get("SSL_CERT_FILE"), Some("/h/mitm/ca-bundle.pem"));
        assert_eq!(get("REQUESTS_CA_BUNDLE"), Some("/h/mitm/ca-bundle.pem"));
        assert_eq!(get("CURL_CA_BUNDLE"), None);
    }

    #[test]
    fn install_commands_are_exact() {
        let commands = install_commands(Path::new("/h/ca.crt"), Path::new(SYSTEM_TRUST_DIR));
        assert_eq!(
            commands,
            vec![
                "install -m 0644 /h/ca.crt /usr/local/share/ca-certificates/glider-mitm-ca.crt",
                "update-ca-certificates"
            ]
        );
    }

    #[test]
    fn install_outside_debian_says_what_to_do_and_touches_nothing() {
        let dir = tempfile::tempdir().expect("tempdir");
        let missing = dir.path().join("no-ca-certificates-here");
        let err = install(Path::new("/h/ca.crt"), &missing).expect_err("no trust dir");
        assert_eq!(err.kind(), std::io::ErrorKind::NotFound);
        assert!(
            err.to_string().contains("not a Debian-style system"),
            "{err}"
        );
        assert!(!missing.exists());
    }

    #[test]
    fn bundle_holds_the_base_roots_and_glider_ca() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ca = Authority::load_or_create(dir.path()).expect("ca");
        let bundle = write_bundle(&ca).expect("bundle");
        let text = std::fs::read_to_string(bundle).expect("read");
        assert!(text.ends_with(ca.cert_pem()));
        if base_bundle(Path::new("/nonexistent")).is_some() {
            assert!(text.matches("BEGIN CERTIFICATE").count() > 1);
        }
    }
}
