//! Glider's own certificate authority (`LoadOrCreateAuthority`) and the leaf
//! certificates it signs: the CA lives at `ca.crt` + `ca.key` (key 0600, both written
//! atomically) and is made on first use; each decrypted host gets a leaf certificate,
//! cached as a ready rustls server config until shortly before it expires.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use glider_sys::{atomicfile, fileacl};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};
use rustls::ServerConfig;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// File name of the CA certificate inside the CA directory.
pub const CERT_FILE: &str = "ca.crt";
/// File name of the CA private key inside the CA directory.
pub const KEY_FILE: &str = "ca.key";

/// How long a new CA is valid.
const CA_VALIDITY: Duration = Duration::from_secs(10 * 365 * 24 * 3600);
/// How long a leaf is valid (short: it is re-made on demand, and a leaked one ages out).
const LEAF_VALIDITY: Duration = Duration::from_secs(30 * 24 * 3600);
/// Certificates start this far in the past, so a client with a slow clock accepts them.
const BACKDATE: Duration = Duration::from_secs(24 * 3600);
/// A cached leaf is replaced this long before it expires.
const LEAF_RENEW_MARGIN: Duration = Duration::from_secs(24 * 3600);
/// Most leaves kept; beyond it expired ones go, then the whole cache is rebuilt lazily.
const LEAF_CACHE_MAX: usize = 1024;

/// What can go wrong with the CA.
#[derive(Debug, thiserror::Error)]
pub enum CaError {
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: {message}")]
    Invalid { path: String, message: String },
    #[error("certificate generation failed: {0}")]
    Generate(#[from] rcgen::Error),
    #[error("TLS setup failed: {0}")]
    Tls(#[from] rustls::Error),
}

fn io_error(path: &Path) -> impl FnOnce(std::io::Error) -> CaError + '_ {
    move |source| CaError::Io {
        path: path.display().to_string(),
        source,
    }
}

/// Glider's CA: its certificate (to hand to clients) and the issuer that signs leaves.
pub struct Authority {
    dir: PathBuf,
    cert_pem: String,
    issuer: Issuer<'static, KeyPair>,
    created: bool,
}

impl std::fmt::Debug for Authority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authority")
            .field("dir", &self.dir)
            .field("created", &self.created)
            .finish_non_exhaustive()
    }
}

impl Authority {
    /// Load the CA from `dir`, or make one there if it has none (the spec's
    /// `LoadOrCreateAuthority`). A key file that others can read is made private again,
    /// with a warning. A certificate whose key does not match is an error, never
    /// silently replaced: clients may trust the old certificate.
    pub fn load_or_create(dir: &Path) -> Result<Authority, CaError> {
        let cert_path = dir.join(CERT_FILE);
        let key_path = dir.join(KEY_FILE);
        match (cert_path.exists(), key_path.exists()) {
            (true, true) => Self::load(dir),
            (cert, key) => {
                if cert || key {
                    tracing::warn!(
                        dir = %dir.display(),
                        "only one of ca.crt and ca.key exists (an interrupted creation?); making a new CA"
                    );
                }
                Self::create(dir)
            }
        }
    }

    fn load(dir: &Path) -> Result<Authority, CaError> {
        let cert_path = dir.join(CERT_FILE);
        let key_path = dir.join(KEY_FILE);
        if fileacl::restrict(&key_path).map_err(io_error(&key_path))? {
            tracing::warn!(key = %key_path.display(), "the CA key was readable by others; it is now 0600");
        }
        let cert_pem = std::fs::read_to_string(&cert_path).map_err(io_error(&cert_path))?;
        let key_pem = std::fs::read_to_string(&key_path).map_err(io_error(&key_path))?;
        let invalid = |path: &Path, message: String| CaError::Invalid {
            path: path.display().to_string(),
            message,
        };
        let key = KeyPair::from_pem(&key_pem)
            .map_err(|e| invalid(&key_path, format!("not a usable private key: {e}")))?;
        let der = first_certificate(&cert_pem)
            .ok_or_else(|| invalid(&cert_path, "no PEM certificate in the file".into()))?;
        let (_, parsed) = x509_parser::parse_x509_certificate(&der)
            .map_err(|e| invalid(&cert_path, format!("not a certificate: {e}")))?;
        if !parsed.is_ca() {
            return Err(invalid(&cert_path, "this certificate is not a CA".into()));
        }
        if parsed.public_key().subject_public_key.data.as_ref() != key.public_key_raw() {
            return Err(invalid(
                &cert_path,
                format!(
                    "the certificate does not belong to {}; restore the matching pair, or remove both files to make a new CA (and trust it again)",
                    key_path.display()
                ),
            ));
        }
        match parsed.validity().time_to_expiration() {
            None => {
                return Err(invalid(
                    &cert_path,
                    "the CA has expired; remove ca.crt and ca.key to make a new one, then trust it again".into(),
                ));
            }
            Some(left) if left < std::time::Duration::from_secs(30 * 24 * 3600) => {
                tracing::warn!(cert = %cert_path.display(), days = left.whole_days(), "the Glider CA expires soon");
            }
            Some(_) => {}
        }
        let issuer = Issuer::from_ca_cert_der(&der, key)?;
        Ok(Authority {
            dir: dir.to_path_buf(),
            cert_pem,
            issuer,
            created: false,
        })
    }

    fn create(dir: &Path) -> Result<Authority, CaError> {
        fileacl::private_dir(dir).map_err(io_error(dir))?;
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::default();
        let mut name = DistinguishedName::new();
        name.push(DnType::CommonName, ca_common_name());
        name.push(DnType::OrganizationName, "Glider");
        params.distinguished_name = name;
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let now = SystemTime::now();
        params.not_before = (now - BACKDATE).into();
        params.not_after = (now + CA_VALIDITY).into();
        let cert = params.self_signed(&key)?;
        let cert_pem = cert.pem();
        // The key first: a crash between the two writes leaves no certificate, and the
        // next start makes a fresh pair instead of trusting a half-made one.
        let key_path = dir.join(KEY_FILE);
        atomicfile::write(
            &key_path,
            key.serialize_pem().as_bytes(),
            fileacl::PRIVATE_FILE,
        )
        .map_err(io_error(&key_path))?;
        let cert_path = dir.join(CERT_FILE);
        atomicfile::write(&cert_path, cert_pem.as_bytes(), fileacl::PRIVATE_FILE)
            .map_err(io_error(&cert_path))?;
        tracing::info!(cert = %cert_path.display(), "made a new Glider CA; clients must trust it (glider ca install)");
        Ok(Authority {
            dir: dir.to_path_buf(),
            cert_pem,
            issuer: Issuer::new(params, key),
            created: true,
        })
    }

    /// Path of `ca.crt`.
    pub fn cert_path(&self) -> PathBuf {
        self.dir.join(CERT_FILE)
    }

    /// Path of `ca.key`.
    pub fn key_path(&self) -> PathBuf {
        self.dir.join(KEY_FILE)
    }

    /// The CA certificate in PEM.
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// Whether this call made the CA (it did not exist before).
    pub fn created(&self) -> bool {
        self.created
    }

    /// A new leaf certificate and key for `host` (a DNS name or an IP address), and
    /// when it should be replaced.
    pub fn issue(&self, host: &str) -> Result<Leaf, CaError> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(vec![host.to_owned()])?;
        let mut name = DistinguishedName::new();
        name.push(DnType::CommonName, host);
        name.push(DnType::OrganizationName, "Glider");
        params.distinguished_name = name;
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.use_authority_key_identifier_extension = true;
        let now = SystemTime::now();
        params.not_before = (now - BACKDATE).into();
        params.not_after = (now + LEAF_VALIDITY).into();
        let cert = params.signed_by(&key, &self.issuer)?;
        Ok(Leaf {
            cert: cert.der().clone(),
            key: PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
            renew_at: now + LEAF_VALIDITY - LEAF_RENEW_MARGIN,
        })
    }
}

/// One issued leaf.
pub struct Leaf {
    pub cert: CertificateDer<'static>,
    pub key: PrivateKeyDer<'static>,
    /// When a cache should stop handing it out.
    pub renew_at: SystemTime,
}

fn ca_common_name() -> String {
    let host = std::fs::read_to_string("/etc/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_default();
    if host.is_empty() {
        "Glider MITM CA".to_owned()
    } else {
        format!("Glider MITM CA ({host})")
    }
}

/// The DER of the first certificate in a PEM text.
pub fn first_certificate(pem: &str) -> Option<CertificateDer<'static>> {
    use rustls::pki_types::pem::PemObject;
    CertificateDer::pem_slice_iter(pem.as_bytes())
        .next()
        .and_then(Result::ok)
}

/// Server TLS configs per host, each with its own leaf, made on first use and kept
/// until the leaf is due for renewal. ALPN offers HTTP/2 and HTTP/1.1.
pub struct LeafCache {
    authority: Arc<Authority>,
    provider: Arc<rustls::crypto::CryptoProvider>,
    entries: Mutex<HashMap<String, (Arc<ServerConfig>, SystemTime)>>,
}

impl LeafCache {
    pub fn new(authority: Arc<Authority>) -> LeafCache {
        LeafCache {
            authority,
            provider: Arc::new(rustls::crypto::aws_lc_rs::default_provider()),
            entries: Mutex::new(HashMap::new()),
        }
    }

    /// The server config for `host`, from the cache or freshly issued.
    pub fn server_config(&self, host: &str) -> Result<Arc<ServerConfig>, CaError> {
        let host = host.to_ascii_lowercase();
        let now = SystemTime::now();
        if let Some((config, renew_at)) = self.lock().get(&host)
            && *renew_at > now
        {
            return Ok(config.clone());
        }
        // Issue outside the lock: two first requests for one host may both issue, and
        // the later one wins the cache; both certificates are valid.
        let leaf = self.authority.issue(&host)?;
        let mut config = ServerConfig::builder_with_provider(self.provider.clone())
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(vec![leaf.cert], leaf.key)?;
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        let config = Arc::new(config);
        let mut entries = self.lock();
        if entries.len() >= LEAF_CACHE_MAX {
            entries.retain(|_, (_, renew_at)| *renew_at > now);
            if entries.len() >= LEAF_CACHE_MAX {
                entries.clear();
            }
        }
        entries.insert(host, (config.clone(), leaf.renew_at));
        Ok(config)
    }

    /// Hosts with a cached leaf.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether no leaf is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Make every cached leaf due now (tests of renewal).
    pub fn expire_all(&self) {
        for (_, renew_at) in self.lock().values_mut() {
            *renew_at = SystemTime::UNIX_EPOCH;
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (Arc<ServerConfig>, SystemTime)>> {
        // A panic while holding the lock leaves a usable map; keep serving.
        self.entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path).expect("meta").permissions().mode() & 0o777
    }

    #[test]
    fn creates_once_then_reloads_the_same_ca() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ca = Authority::load_or_create(dir.path()).expect("create");
        assert!(ca.created());
        assert_eq!(mode(&ca.key_path()), 0o600);
        assert_eq!(mode(&ca.cert_path()), 0o600);
        let pem = ca.cert_pem().to_owned();

        // Exposed key: repaired on load.
        fileacl::set_mode(&ca.key_path(), 0o644).expect("chmod");
        let again = Authority::load_or_create(dir.path()).expect("reload");
        assert!(!again.created());
        assert_eq!(again.cert_pem(), pem);
        assert_eq!(mode(&again.key_path()), 0o600);

        // A leaf from the reloaded CA names the CA as its issuer, by key identifier.
        let leaf = again.issue("api.anthropic.com").expect("leaf");
        let (_, parsed) = x509_parser::parse_x509_certificate(&leaf.cert).expect("parse");
        let ca_der = first_certificate(&pem).expect("ca der");
        let (_, ca_parsed) = x509_parser::parse_x509_certificate(&ca_der).expect("parse");
        assert_eq!(parsed.issuer(), ca_parsed.subject());
        parsed
            .verify_signature(Some(ca_parsed.public_key()))
            .expect("signed by the CA key");
    }

    #[test]
    fn a_mismatched_pair_is_an_error_not_a_silent_new_ca() {
        let a = tempfile::tempdir().expect("tempdir");
        let b = tempfile::tempdir().expect("tempdir");
        Authority::load_or_create(a.path()).expect("a");
        Authority::load_or_create(b.path()).expect("b");
        std::fs::copy(b.path().join(KEY_FILE), a.path().join(KEY_FILE)).expect("copy");
        let err = Authority::load_or_create(a.path()).expect_err("mismatch");
        assert!(err.to_string().contains("does not belong"), "{err}");
    }

    #[test]
    fn a_lone_key_is_replaced_by_a_new_pair() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join(KEY_FILE), "junk").expect("write");
        let ca = Authority::load_or_create(dir.path()).expect("create");
        assert!(ca.created());
        assert!(ca.cert_path().exists());
    }

    #[test]
    fn leaves_are_cached_until_due() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ca = Arc::new(Authority::load_or_create(dir.path()).expect("create"));
        let cache = LeafCache::new(ca);
        let first = cache.server_config("Example.COM").expect("config");
        let second = cache.server_config("example.com").expect("config");
        assert!(Arc::ptr_eq(&first, &second));
        assert_eq!(cache.len(), 1);
        cache.expire_all();
        let renewed = cache.server_config("example.com").expect("config");
        assert!(!Arc::ptr_eq(&first, &renewed));
        assert!(cache.server_config("127.0.0.1").is_ok(), "IP leaves work");
    }
}
