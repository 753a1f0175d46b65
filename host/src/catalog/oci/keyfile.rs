//! cosign's private key files. `cosign generate-key-pair` writes an
//! `ENCRYPTED SIGSTORE PRIVATE KEY` PEM (cosign 1.x wrote `ENCRYPTED COSIGN
//! PRIVATE KEY`): the PEM's body is go-securesystemslib's `encrypted`
//! envelope, JSON with the key derivation (scrypt, its parameters and salt),
//! the cipher (NaCl secretbox, its nonce) and the sealed PKCS#8 key:
//!
//! ```json
//! {"kdf": {"name": "scrypt", "params": {"N": 32768, "r": 8, "p": 1}, "salt": "…"},
//!  "cipher": {"name": "nacl/secretbox", "nonce": "…"},
//!  "ciphertext": "…"}
//! ```
//!
//! Each byte string is standard base64. scrypt derives a 32-byte key from
//! the password and the salt; secretbox (XSalsa20-Poly1305, its tag before
//! the ciphertext) seals the key's PKCS#8 DER. Both are RustCrypto's
//! implementations (`scrypt`, `crypto_secretbox`), not code of toolcage's
//! own.
//!
//! Threat model: the file is the author's, but it may be damaged or not a
//! key at all, so nothing in it makes toolcage panic or use unbounded
//! memory: scrypt's parameters are checked (at most
//! [`MAX_SCRYPT_MEMORY`] bytes) before any work is done.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use crypto_secretbox::aead::{Aead as _, KeyInit as _};
use p256::pkcs8::{DecodePrivateKey as _, EncodePrivateKey as _};
use zeroize::Zeroizing;

use super::SigningKey;
use super::signature::{PemError, SIGSTORE_KEY_LABEL, is_encrypted};

/// cosign's scrypt parameters for new keys: N = 2^15, r = 8, p = 1.
pub const COSIGN_SCRYPT_LOG_N: u8 = 15;
/// The most memory a key file's scrypt parameters may ask for (128·N·r
/// bytes): 256 MiB, eight times cosign's own.
pub const MAX_SCRYPT_MEMORY: u64 = 256 << 20;

const KDF_NAME: &str = "scrypt";
const CIPHER_NAME: &str = "nacl/secretbox";
const SALT_LEN: usize = 32;
const NONCE_LEN: usize = 24;

/// A key file that cannot be read, decrypted or written.
#[derive(Debug, thiserror::Error)]
#[error("cannot use the key file {}", path.display())]
pub struct KeyFileError {
    /// The key file.
    pub path: PathBuf,
    /// What went wrong.
    #[source]
    pub problem: KeyProblem,
}

/// What is wrong with a key file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KeyProblem {
    /// The file cannot be read or written.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// `generate-key-pair` would overwrite an existing file.
    #[error("it exists already; refusing to overwrite it")]
    Exists,
    /// The key is encrypted and no password could be had.
    #[error("it is encrypted, and no password was given")]
    NoPassword(#[source] std::io::Error),
    /// The password does not open the key (or the sealed bytes were
    /// changed: secretbox cannot tell the two apart).
    #[error(
        "the password is wrong, or the encrypted key was damaged (it does not open with that password)"
    )]
    WrongPassword,
    /// The envelope names a key derivation other than scrypt.
    #[error("its key derivation is `{0}`; only scrypt (cosign's) is read")]
    UnsupportedKdf(String),
    /// The envelope names a cipher other than NaCl secretbox.
    #[error("its cipher is `{0}`; only nacl/secretbox (cosign's) is read")]
    UnsupportedCipher(String),
    /// The scrypt parameters are invalid or ask for too much memory.
    #[error("its scrypt parameters N={n} r={r} p={p} are {reason}")]
    KdfParams {
        /// N.
        n: u64,
        /// r.
        r: u64,
        /// p.
        p: u64,
        /// Why they are refused.
        reason: &'static str,
    },
    /// Not a PEM key toolcage reads, or a damaged one.
    #[error("{0}")]
    Malformed(String),
    /// An unencrypted PEM key toolcage does not read.
    #[error(transparent)]
    Pem(#[from] PemError),
}

/// A cosign encrypted key's envelope (go-securesystemslib's `encrypted`).
#[derive(serde::Serialize, serde::Deserialize)]
struct Envelope {
    kdf: Kdf,
    cipher: Cipher,
    #[serde(with = "b64")]
    ciphertext: Vec<u8>,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct Kdf {
    name: String,
    params: KdfParams,
    #[serde(with = "b64")]
    salt: Vec<u8>,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct KdfParams {
    #[serde(rename = "N")]
    n: u64,
    r: u64,
    p: u64,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct Cipher {
    name: String,
    #[serde(with = "b64")]
    nonce: Vec<u8>,
}

mod b64 {
    use base64::Engine as _;
    pub fn serialize<S: serde::Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&base64::engine::general_purpose::STANDARD.encode(bytes))
    }
    pub fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let text: String = serde::Deserialize::deserialize(d)?;
        base64::engine::general_purpose::STANDARD
            .decode(text.trim())
            .map_err(serde::de::Error::custom)
    }
}

/// Where a key's password comes from, asked only when the key is
/// encrypted.
pub type PasswordSource<'a> = &'a mut dyn FnMut() -> std::io::Result<Zeroizing<String>>;

impl SigningKey {
    /// Reads an unencrypted PEM private key file; an encrypted one is
    /// refused for want of a password ([`SigningKey::open`] asks for one).
    pub fn from_file(path: &Path) -> Result<SigningKey, KeyFileError> {
        SigningKey::open(path, &mut || {
            Err(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "SigningKey::from_file reads no password",
            ))
        })
    }

    /// Reads a private key file: cosign's encrypted key (both labels),
    /// asking `password` for its password, or an unencrypted PEM PKCS#8 or
    /// SEC1 P-256 key (`password` is not asked).
    pub fn open(path: &Path, password: PasswordSource<'_>) -> Result<SigningKey, KeyFileError> {
        let fail = |problem: KeyProblem| KeyFileError {
            path: path.to_path_buf(),
            problem,
        };
        let pem = Zeroizing::new(std::fs::read_to_string(path).map_err(|e| fail(e.into()))?);
        if !is_encrypted(&pem) {
            return SigningKey::from_pem(&pem).map_err(|e| fail(e.into()));
        }
        let password = password().map_err(|e| fail(KeyProblem::NoPassword(e)))?;
        SigningKey::from_encrypted_pem(&pem, password.as_bytes()).map_err(fail)
    }

    /// Opens cosign's encrypted PEM key with `password`.
    pub fn from_encrypted_pem(pem: &str, password: &[u8]) -> Result<SigningKey, KeyProblem> {
        let envelope = pem_body(pem)?;
        let envelope: Envelope = serde_json::from_slice(&envelope).map_err(|e| {
            KeyProblem::Malformed(format!(
                "its encrypted body is not go-securesystemslib's JSON envelope (truncated or damaged?): {e}"
            ))
        })?;
        if envelope.kdf.name != KDF_NAME {
            return Err(KeyProblem::UnsupportedKdf(envelope.kdf.name));
        }
        if envelope.cipher.name != CIPHER_NAME {
            return Err(KeyProblem::UnsupportedCipher(envelope.cipher.name));
        }
        let nonce: [u8; NONCE_LEN] = envelope.cipher.nonce.as_slice().try_into().map_err(|_| {
            KeyProblem::Malformed(format!(
                "its nonce is {} bytes, not {NONCE_LEN}",
                envelope.cipher.nonce.len()
            ))
        })?;
        let key = derive(password, &envelope.kdf.salt, &envelope.kdf.params)?;
        let der = Zeroizing::new(
            crypto_secretbox::XSalsa20Poly1305::new(key.as_ref().into())
                .decrypt(&nonce.into(), envelope.ciphertext.as_slice())
                .map_err(|_| KeyProblem::WrongPassword)?,
        );
        let key = p256::ecdsa::SigningKey::from_pkcs8_der(&der).map_err(|e| {
            KeyProblem::Malformed(format!(
                "it opens, but holds no PKCS#8 ECDSA P-256 key (toolcage signs with P-256 only): {e}"
            ))
        })?;
        Ok(SigningKey::from_key(key))
    }

    /// A new random P-256 key, from the operating system's random source.
    pub fn generate() -> std::io::Result<SigningKey> {
        loop {
            let mut bytes = Zeroizing::new([0u8; 32]);
            random(bytes.as_mut())?;
            // A scalar of zero or past the group's order (odds about 2^-32)
            // is drawn again.
            if let Ok(secret) = p256::SecretKey::from_slice(bytes.as_ref()) {
                return Ok(SigningKey::from_key(secret.into()));
            }
        }
    }

    /// The key as cosign's `ENCRYPTED SIGSTORE PRIVATE KEY` PEM, sealed with
    /// `password` under scrypt with N = 2^`log_n`, r = 8, p = 1 (cosign uses
    /// [`COSIGN_SCRYPT_LOG_N`]).
    pub fn to_encrypted_pem(&self, password: &[u8], log_n: u8) -> std::io::Result<String> {
        let mut salt = vec![0u8; SALT_LEN];
        random(&mut salt)?;
        let mut nonce = [0u8; NONCE_LEN];
        random(&mut nonce)?;
        let params = KdfParams {
            n: 1 << log_n,
            r: 8,
            p: 1,
        };
        let key = derive(password, &salt, &params)
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e.to_string()))?;
        let der = self
            .to_pkcs8_der()
            .map_err(|e| std::io::Error::other(format!("the key does not encode: {e}")))?;
        let ciphertext = crypto_secretbox::XSalsa20Poly1305::new(key.as_ref().into())
            .encrypt(&nonce.into(), der.as_slice())
            .map_err(|_| std::io::Error::other("secretbox failed to seal the key"))?;
        let envelope = Envelope {
            kdf: Kdf {
                name: KDF_NAME.into(),
                params,
                salt,
            },
            cipher: Cipher {
                name: CIPHER_NAME.into(),
                nonce: nonce.to_vec(),
            },
            ciphertext,
        };
        let json = serde_json::to_vec(&envelope).expect("the envelope serializes");
        Ok(pem_encode(SIGSTORE_KEY_LABEL, &json))
    }

    /// Writes a new key pair as `cosign generate-key-pair` does:
    /// `PREFIX.key` (encrypted with `password`, cosign's scrypt parameters,
    /// readable by its owner only) and `PREFIX.pub` (PEM). Refuses to
    /// overwrite either file. Returns the key.
    pub fn generate_pair(
        prefix: &Path,
        password: &[u8],
    ) -> Result<(SigningKey, PathBuf, PathBuf), KeyFileError> {
        let path_with = |extension: &str| {
            let mut path = prefix.as_os_str().to_owned();
            path.push(extension);
            PathBuf::from(path)
        };
        let (private, public) = (path_with(".key"), path_with(".pub"));
        for path in [&private, &public] {
            if path.exists() {
                return Err(KeyFileError {
                    path: path.clone(),
                    problem: KeyProblem::Exists,
                });
            }
        }
        let failed = |path: &Path| {
            let path = path.to_path_buf();
            move |e: std::io::Error| KeyFileError {
                path,
                problem: e.into(),
            }
        };
        let key = SigningKey::generate().map_err(failed(&private))?;
        let pem = key
            .to_encrypted_pem(password, COSIGN_SCRYPT_LOG_N)
            .map_err(failed(&private))?;
        write_new(&private, pem.as_bytes(), 0o600)?;
        if let Err(error) = write_new(&public, key.public_pem().as_bytes(), 0o644) {
            std::fs::remove_file(&private).ok();
            return Err(error);
        }
        Ok((key, private, public))
    }

    fn to_pkcs8_der(&self) -> p256::pkcs8::Result<Zeroizing<Vec<u8>>> {
        let secret = p256::SecretKey::from(&self.key);
        Ok(Zeroizing::new(secret.to_pkcs8_der()?.as_bytes().to_vec()))
    }
}

/// Creates `path` (never over an existing file) with `contents`.
fn write_new(path: &Path, contents: &[u8], mode: u32) -> Result<(), KeyFileError> {
    let fail = |e: std::io::Error| KeyFileError {
        path: path.to_path_buf(),
        problem: if e.kind() == std::io::ErrorKind::AlreadyExists {
            KeyProblem::Exists
        } else {
            e.into()
        },
    };
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, mode);
    #[cfg(not(unix))]
    let _ = mode;
    let mut file = options.open(path).map_err(fail)?;
    file.write_all(contents)
        .and_then(|()| file.sync_all())
        .map_err(fail)
}

/// scrypt's 32-byte key for `password` and `salt`, after checking that the
/// parameters are valid and bounded.
fn derive(
    password: &[u8],
    salt: &[u8],
    params: &KdfParams,
) -> Result<Zeroizing<[u8; 32]>, KeyProblem> {
    let refuse = |reason| KeyProblem::KdfParams {
        n: params.n,
        r: params.r,
        p: params.p,
        reason,
    };
    if params.n < 2 || !params.n.is_power_of_two() {
        return Err(refuse("invalid (N must be a power of two, at least 2)"));
    }
    if params.r == 0 || params.p == 0 || params.p > 16 || params.r > 1024 {
        return Err(refuse("invalid (r and p must be at least 1; p at most 16)"));
    }
    if params
        .n
        .checked_mul(params.r)
        .and_then(|v| v.checked_mul(128))
        .is_none_or(|bytes| bytes > MAX_SCRYPT_MEMORY)
    {
        return Err(refuse(
            "too costly (more than 256 MiB of memory; cosign's take 32 MiB)",
        ));
    }
    let log_n = params.n.trailing_zeros() as u8;
    let scrypt = scrypt::Params::new(log_n, params.r as u32, params.p as u32, 32)
        .map_err(|_| refuse("invalid"))?;
    let mut key = Zeroizing::new([0u8; 32]);
    scrypt::scrypt(password, salt, &scrypt, key.as_mut()).map_err(|_| refuse("invalid"))?;
    Ok(key)
}

/// The bytes between a PEM's BEGIN and END lines.
fn pem_body(pem: &str) -> Result<Zeroizing<Vec<u8>>, KeyProblem> {
    let begin = pem
        .find("-----BEGIN ")
        .and_then(|start| pem[start..].find('\n').map(|end| start + end + 1))
        .ok_or_else(|| KeyProblem::Malformed("no PEM BEGIN line".into()))?;
    let end = pem[begin..]
        .find("-----END ")
        .map(|end| begin + end)
        .ok_or_else(|| KeyProblem::Malformed("its PEM has no END line (truncated?)".into()))?;
    let text: String = pem[begin..end]
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect();
    base64::engine::general_purpose::STANDARD
        .decode(text)
        .map(Zeroizing::new)
        .map_err(|e| KeyProblem::Malformed(format!("its PEM body is not base64: {e}")))
}

fn pem_encode(label: &str, bytes: &[u8]) -> String {
    let text = base64::engine::general_purpose::STANDARD.encode(bytes);
    let mut pem = format!("-----BEGIN {label}-----\n");
    for line in text.as_bytes().chunks(64) {
        pem.push_str(std::str::from_utf8(line).expect("base64 is ASCII"));
        pem.push('\n');
    }
    pem.push_str(&format!("-----END {label}-----\n"));
    pem
}

fn random(bytes: &mut [u8]) -> std::io::Result<()> {
    getrandom::fill(bytes).map_err(|e| {
        std::io::Error::other(format!("the operating system's random source failed: {e}"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seals_and_opens_and_refuses_what_it_should() {
        let key = SigningKey::generate().unwrap();
        // A cheap N keeps the test fast; the format is the same.
        let pem = key.to_encrypted_pem(b"hunter2", 4).unwrap();
        assert!(pem.starts_with("-----BEGIN ENCRYPTED SIGSTORE PRIVATE KEY-----\n"));
        let opened = SigningKey::from_encrypted_pem(&pem, b"hunter2").unwrap();
        assert_eq!(opened.public_pem(), key.public_pem());
        // cosign 1.x's label opens the same.
        let old = pem.replace(SIGSTORE_KEY_LABEL, super::super::COSIGN_KEY_LABEL);
        assert!(is_encrypted(&old));
        assert!(SigningKey::from_encrypted_pem(&old, b"hunter2").is_ok());

        let wrong = SigningKey::from_encrypted_pem(&pem, b"hunter3").unwrap_err();
        assert!(matches!(wrong, KeyProblem::WrongPassword), "{wrong}");
        let cut = &pem[..pem.len() / 2];
        let error = SigningKey::from_encrypted_pem(cut, b"hunter2").unwrap_err();
        assert!(matches!(error, KeyProblem::Malformed(_)), "{error}");

        let body = pem_body(&pem).unwrap();
        let mut envelope: serde_json::Value = serde_json::from_slice(&body).unwrap();
        envelope["kdf"]["name"] = "argon2".into();
        let other = pem_encode(SIGSTORE_KEY_LABEL, envelope.to_string().as_bytes());
        let error = SigningKey::from_encrypted_pem(&other, b"hunter2").unwrap_err();
        assert!(
            matches!(error, KeyProblem::UnsupportedKdf(ref n) if n == "argon2"),
            "{error}"
        );
        envelope["kdf"]["name"] = "scrypt".into();
        envelope["kdf"]["params"]["N"] = (1u64 << 40).into();
        let costly = pem_encode(SIGSTORE_KEY_LABEL, envelope.to_string().as_bytes());
        let error = SigningKey::from_encrypted_pem(&costly, b"hunter2").unwrap_err();
        assert!(error.to_string().contains("too costly"), "{error}");
    }

    #[test]
    fn writes_a_pair_once() {
        let dir = tempfile::tempdir().unwrap();
        let prefix = dir.path().join("team");
        let (key, private, public) = SigningKey::generate_pair(&prefix, b"").unwrap();
        let mut no_password = || Ok(Zeroizing::new(String::new()));
        let opened = SigningKey::open(&private, &mut no_password).unwrap();
        assert_eq!(opened.public_pem(), key.public_pem());
        assert_eq!(std::fs::read_to_string(&public).unwrap(), key.public_pem());
        let error = SigningKey::generate_pair(&prefix, b"").unwrap_err();
        assert!(matches!(error.problem, KeyProblem::Exists), "{error}");
        assert_eq!(error.path, private);
    }
}
