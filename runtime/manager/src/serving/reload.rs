//! Keeping the secure port's TLS material current: the certificate and key files and
//! `--client-ca-file` are re-read when their directories change (a mounted Secret is
//! replaced by a symlink swap) and every minute; the client CA ConfigMap is re-read
//! every minute. A change that does not load is logged and the previous material
//! keeps serving.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use tokio::sync::Notify;

use super::tls::{self, TlsError, TlsState};
use super::{AUTHENTICATION_CONFIGMAP, ServingMetrics};

/// How often files are re-read even without a change notification, and the ConfigMap
/// re-read (upstream's dynamic certificate content re-reads every minute).
const RESCAN: Duration = Duration::from_secs(60);
/// Writers replace a certificate and its key one after the other: wait this long after
/// a notification for the pair.
const SETTLE: Duration = Duration::from_millis(200);

/// The contents of `files`, in order.
pub fn read_all(files: &[PathBuf]) -> Result<Vec<Vec<u8>>, TlsError> {
    files.iter().map(|f| tls::read_file(f)).collect()
}

/// Re-reads `--tls-cert-file` and `--tls-private-key-file` (`files`, last read as
/// `contents`) and serves a changed pair that loads.
pub fn serving_certificate(
    files: [PathBuf; 2],
    contents: Vec<Vec<u8>>,
    state: Arc<TlsState>,
    metrics: ServingMetrics,
) {
    let material = ("serving-certificate", metrics);
    watch_files(files.to_vec(), contents, material, move |read| {
        let certificate = tls::certificate_from_pem((&files[0], &read[0]), (&files[1], &read[1]))?;
        state.set_certificate(certificate)
    });
}

/// Re-reads `--client-ca-file` and verifies client certificates with a changed bundle
/// that loads.
pub fn client_ca_file(
    files: [PathBuf; 1],
    contents: Vec<Vec<u8>>,
    state: Arc<TlsState>,
    metrics: ServingMetrics,
) {
    let origin = format!("--client-ca-file {}", files[0].display());
    watch_files(
        files.to_vec(),
        contents,
        ("client-ca", metrics),
        move |read| {
            let roots = tls::client_ca_from_pem(&origin, &read[0])?;
            state.set_client_ca(Some((origin.clone(), roots)))
        },
    );
}

fn watch_files(
    files: Vec<PathBuf>,
    mut last: Vec<Vec<u8>>,
    (what, metrics): (&'static str, ServingMetrics),
    apply: impl Fn(&[Vec<u8>]) -> Result<(), TlsError> + Send + 'static,
) {
    tokio::spawn(async move {
        let changed = Arc::new(Notify::new());
        let mut dirs: Vec<PathBuf> = files
            .iter()
            .filter_map(|f| f.parent().map(|d| d.to_owned()))
            .collect();
        dirs.sort();
        dirs.dedup();
        let _watch = match crate::hot_swap::watch::watch(&dirs, changed.clone()) {
            Ok(watch) => Some(watch),
            Err(err) => {
                tracing::warn!(error = %err, "cannot watch the {what} files; re-reading them every minute");
                None
            }
        };
        loop {
            tokio::select! {
                _ = changed.notified() => tokio::time::sleep(SETTLE).await,
                _ = tokio::time::sleep(RESCAN) => {}
            }
            let read = match read_all(&files) {
                Ok(read) => read,
                Err(err) => {
                    tracing::warn!(error = %err, "cannot re-read the {what}; the previous one keeps serving");
                    continue;
                }
            };
            if read == last {
                continue;
            }
            let result = apply(&read);
            metrics.reloaded(what, result.is_ok());
            match result {
                Ok(()) => tracing::info!(files = ?files, "reloaded the {what}"),
                Err(err) => {
                    tracing::warn!(error = %err, "the changed {what} does not load; the previous one keeps serving")
                }
            }
            last = read;
        }
    });
}

/// `client-ca-file` of ConfigMap `kube-system/extension-apiserver-authentication`;
/// `None` when the ConfigMap or the key is missing.
pub async fn lookup_client_ca(client: &kube::Client) -> Result<Option<Vec<u8>>, kube::Error> {
    let (namespace, name) = AUTHENTICATION_CONFIGMAP;
    let configmap = Api::<ConfigMap>::namespaced(client.clone(), namespace)
        .get_opt(name)
        .await?;
    Ok(configmap
        .and_then(|c| c.data)
        .and_then(|mut data| data.remove("client-ca-file"))
        .map(String::into_bytes))
}

/// How errors name the ConfigMap's client CA.
pub fn configmap_origin() -> String {
    let (namespace, name) = AUTHENTICATION_CONFIGMAP;
    format!("ConfigMap {namespace}/{name} client-ca-file")
}

/// Re-reads the client CA ConfigMap every minute and verifies client certificates
/// with a changed CA that loads (the last one when it is removed).
pub fn client_ca_configmap(
    client: kube::Client,
    mut last: Option<Vec<u8>>,
    state: Arc<TlsState>,
    metrics: ServingMetrics,
) {
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(RESCAN).await;
            let found = match lookup_client_ca(&client).await {
                Ok(found) => found,
                Err(err) => {
                    tracing::warn!(error = %err, "cannot re-read the client CA ConfigMap; the previous CA keeps verifying");
                    continue;
                }
            };
            if found == last {
                continue;
            }
            let origin = configmap_origin();
            // A ConfigMap (or key) removed keeps the last authorities, as upstream.
            let Some(pem) = &found else {
                tracing::warn!("{origin} is gone; the last client CA keeps verifying");
                continue;
            };
            let result = tls::client_ca_from_pem(&origin, pem)
                .and_then(|roots| state.set_client_ca(Some((origin.clone(), roots))));
            metrics.reloaded("client-ca", result.is_ok());
            match result {
                Ok(()) => tracing::info!("reloaded the client CA from {origin}"),
                Err(err) => {
                    tracing::warn!(error = %err, "the changed client CA does not load; the previous one keeps verifying")
                }
            }
            last = found;
        }
    });
}
