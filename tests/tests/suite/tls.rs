//! `rediss://`: every lock mode over TLS against a real `redis-server` listening with
//! `--tls-port`, whose CA and certificate this test generates (rcgen), so the client must be
//! told to trust that CA (`ClientBuilder::tls_root_certificate`). Needs a `redis-server` built
//! with TLS (Debian's is).

use crate::common;

use std::path::Path;
use std::time::Duration;

use common::as_other_owner;
use distlock::{Client, Error};
use distlock_testkit::RedisServer;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

/// A private CA: its certificate (PEM) and what signs with it.
struct Ca {
    pem: String,
    issuer: Issuer<'static, KeyPair>,
}

fn new_ca(name: &str) -> Ca {
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let key = KeyPair::generate().expect("CA key");
    let cert = params.self_signed(&key).expect("self-signed CA");
    Ca {
        pem: cert.pem(),
        issuer: Issuer::new(params, key),
    }
}

/// Writes a server certificate for `127.0.0.1` and `localhost`, signed by `ca`, and its key
/// into `dir`; returns their paths.
fn server_cert(ca: &Ca, dir: &Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let mut params = CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
        .expect("server params");
    params
        .distinguished_name
        .push(DnType::CommonName, "distlock test server");
    params.use_authority_key_identifier_extension = true;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let key = KeyPair::generate().expect("server key");
    let cert = params
        .signed_by(&key, &ca.issuer)
        .expect("signed by the CA");
    let (cert_path, key_path) = (dir.join("server.crt"), dir.join("server.key"));
    std::fs::write(&cert_path, cert.pem()).expect("write the certificate");
    std::fs::write(&key_path, key.serialize_pem()).expect("write the key");
    (cert_path, key_path)
}

/// A TLS server with a certificate from a fresh private CA, and that CA. The temp dir holds
/// the certificate files for as long as the server runs.
fn tls_server() -> (RedisServer, Ca, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("temp dir");
    let ca = new_ca("distlock test CA");
    let (cert, key) = server_cert(&ca, dir.path());
    let server = RedisServer::builder().tls(cert, key).start();
    (server, ca, dir)
}

async fn tls_client(server: &RedisServer, ca: &Ca) -> Client {
    Client::builder(&server.tls_url().expect("a TLS port"))
        .tls_root_certificate(ca.pem.as_bytes())
        .connect()
        .await
        .expect("connect over TLS, trusting the test CA")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_mode_acquires_and_releases_over_tls() {
    let (server, ca, _files) = tls_server();
    let locks = tls_client(&server, &ca).await;

    // setnx, with a waiter woken by the release: the wake-up arrives as a RESP3 push frame
    // on the TLS connection.
    let held = locks
        .lock("tls-setnx")
        .fencing(true)
        .try_acquire()
        .await
        .expect("setnx");
    let first = held.fencing_token().expect("fencing(true)");
    let waiter = {
        let locks = locks.clone();
        tokio::spawn(async move {
            locks
                .lock("tls-setnx")
                .wait(Duration::from_secs(30))
                .fencing(true)
                .acquire()
                .await
        })
    };
    tokio::task::yield_now().await;
    held.release().await.expect("setnx release");
    let next = waiter.await.expect("task").expect("the waiter gets it");
    assert!(next.fencing_token().expect("fencing(true)") > first);
    next.release().await.expect("setnx release");

    // reentrant, with a re-entry that keeps the token, and an extension.
    let mut outer = locks
        .reentrant("tls-re")
        .fencing(true)
        .try_acquire()
        .await
        .expect("reentrant");
    let inner = locks
        .reentrant("tls-re")
        .fencing(true)
        .try_acquire()
        .await
        .expect("re-entry");
    assert_eq!(inner.fencing_token(), outer.fencing_token());
    outer
        .extend(Duration::from_secs(60))
        .await
        .expect("extend over TLS");
    inner.release().await.expect("inner release");
    outer.release().await.expect("outer release");

    // read/write: two readers share, a writer waits for both, then takes a larger token.
    let reader = locks
        .read("tls-rw")
        .fencing(true)
        .try_acquire()
        .await
        .expect("read");
    let other_reader = as_other_owner(locks.read("tls-rw").try_acquire())
        .await
        .expect("a second reader shares");
    let before = reader.fencing_token();
    let writer = {
        let locks = locks.clone();
        tokio::spawn(as_other_owner(async move {
            locks
                .write("tls-rw")
                .wait(Duration::from_secs(30))
                .fencing(true)
                .acquire()
                .await
        }))
    };
    reader.release().await.expect("read release");
    other_reader.release().await.expect("read release");
    let writer = writer.await.expect("task").expect("the writer gets it");
    assert!(writer.fencing_token() > before);
    writer.release().await.expect("write release");

    // Every lock is gone from the server (seen through the plain port).
    let mut plain = server.async_connection().await;
    let left: Vec<String> = redis::cmd("KEYS")
        .arg("distlock:{tls-*}")
        .query_async(&mut plain)
        .await
        .expect("KEYS");
    assert!(left.is_empty(), "locks left behind: {left:?}");
}

#[tokio::test]
async fn a_server_signed_by_an_untrusted_ca_is_refused() {
    let (server, _ca, _files) = tls_server();
    let url = server.tls_url().expect("a TLS port");

    // The default trust (webpki roots) does not know the private CA.
    let err = Client::connect(&url)
        .await
        .expect_err("the private CA is not trusted by default");
    assert!(
        err.to_string().to_lowercase().contains("certificate"),
        "not a certificate error: {err}"
    );

    // Nor does trusting another CA help.
    let stranger = new_ca("some other CA");
    let err = Client::builder(&url)
        .tls_root_certificate(stranger.pem.as_bytes())
        .connect()
        .await
        .expect_err("a certificate from another CA");
    assert!(
        err.to_string().to_lowercase().contains("certificate"),
        "not a certificate error: {err}"
    );
}

#[tokio::test]
async fn a_root_certificate_for_a_plain_url_is_a_config_error() {
    let (server, ca, _files) = tls_server();
    let err = Client::builder(&server.url())
        .tls_root_certificate(ca.pem.as_bytes())
        .connect()
        .await
        .expect_err("redis:// with a root certificate");
    assert!(matches!(err, Error::InvalidConfig { .. }), "{err:?}");
}
