//! The artifact: a Wasm component in the CNCF Wasm OCI layout (as wkg,
//! wash, Spin and Wassette publish it), and the OCI manifests around it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{Digest, OciError, Reference};

/// The config media type of a Wasm component artifact.
pub const CONFIG_MEDIA_TYPE: &str = "application/vnd.wasm.config.v0+json";
/// The media type of its one layer, the component's bytes.
pub const LAYER_MEDIA_TYPE: &str = "application/wasm";
/// The OCI image manifest media type.
pub(crate) const MANIFEST_MEDIA_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";
/// Manifest annotation: the tool names the component offers, comma-separated.
pub const ANNOTATION_TOOLS: &str = "dev.toolcage.tools";
/// The version of toolcage's WIT package (`toolcage:tool`).
pub const WIT_VERSION: &str = "0.1.4";
/// Manifest annotation: the toolcage WIT version it was built against.
pub const ANNOTATION_WIT: &str = "dev.toolcage.wit";

/// The media types a pull accepts for a manifest: OCI's and Docker's, image
/// and index (an index is refused after, with a message that says so).
#[cfg_attr(not(feature = "oci"), allow(dead_code))]
pub(crate) const ACCEPTED_MANIFESTS: &[&str] = &[
    MANIFEST_MEDIA_TYPE,
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
];

/// An OCI content descriptor: a blob's media type, digest and size (not a
/// tool's [`Descriptor`](crate::Descriptor)).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct BlobDescriptor {
    #[serde(rename = "mediaType")]
    pub media_type: String,
    pub digest: String,
    pub size: u64,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

impl BlobDescriptor {
    pub fn of(media_type: &str, bytes: &[u8]) -> BlobDescriptor {
        BlobDescriptor {
            media_type: media_type.to_string(),
            digest: Digest::of(bytes).to_string(),
            size: bytes.len() as u64,
            annotations: BTreeMap::new(),
        }
    }
}

/// An OCI image manifest (and enough of an index to recognise one).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Manifest {
    #[serde(rename = "schemaVersion")]
    pub schema_version: u32,
    #[serde(rename = "mediaType", default, skip_serializing_if = "Option::is_none")]
    pub media_type: Option<String>,
    #[serde(
        rename = "artifactType",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub artifact_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<BlobDescriptor>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub layers: Vec<BlobDescriptor>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manifests: Option<Vec<serde_json::Value>>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

impl Manifest {
    pub fn parse(reference: &Reference, bytes: &[u8]) -> Result<Manifest, OciError> {
        serde_json::from_slice(bytes).map_err(|e| OciError::Layout {
            reference: reference.to_string(),
            reason: format!("the manifest is not an OCI manifest: {e}"),
        })
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a manifest serializes")
    }

    /// The component layer of a Wasm component artifact, or what was found
    /// instead.
    pub fn component_layer(&self, reference: &Reference) -> Result<&BlobDescriptor, OciError> {
        let refuse = |reason: String| OciError::Layout {
            reference: reference.to_string(),
            reason,
        };
        if self.manifests.is_some() {
            return Err(refuse(
                "found an image index (a multi-platform image), not a component manifest".into(),
            ));
        }
        if self.schema_version != 2 {
            return Err(refuse(format!(
                "found schemaVersion {}, expected 2",
                self.schema_version
            )));
        }
        let config = self
            .config
            .as_ref()
            .map_or("none", |c| c.media_type.as_str());
        let layers: Vec<&str> = self.layers.iter().map(|l| l.media_type.as_str()).collect();
        match (config, layers.as_slice()) {
            (CONFIG_MEDIA_TYPE, [LAYER_MEDIA_TYPE]) => {
                let layer = &self.layers[0];
                layer
                    .digest
                    .parse::<Digest>()
                    .map_err(|e| refuse(format!("the layer's digest: {e}")))?;
                Ok(layer)
            }
            _ => Err(refuse(format!(
                "expected config {CONFIG_MEDIA_TYPE} and exactly one {LAYER_MEDIA_TYPE} layer; found config {config} and layers [{}]",
                layers.join(", ")
            ))),
        }
    }
}

/// The manifest, config and layer of `component` in the CNCF layout,
/// annotated with `annotations` (and `org.opencontainers.image.created`).
#[cfg_attr(not(feature = "oci"), allow(dead_code))]
pub(crate) fn component_artifact(
    component: &[u8],
    mut annotations: BTreeMap<String, String>,
    created: &str,
) -> (Vec<u8>, Vec<u8>) {
    let layer = BlobDescriptor::of(LAYER_MEDIA_TYPE, component);
    let config = serde_json::json!({
        "created": created,
        "architecture": "wasm",
        "os": "wasip2",
        "layerDigests": [layer.digest],
    });
    let config = serde_json::to_vec(&config).expect("JSON serializes");
    annotations
        .entry("org.opencontainers.image.created".into())
        .or_insert_with(|| created.to_string());
    let manifest = Manifest {
        schema_version: 2,
        media_type: Some(MANIFEST_MEDIA_TYPE.into()),
        artifact_type: Some(CONFIG_MEDIA_TYPE.into()),
        config: Some(BlobDescriptor::of(CONFIG_MEDIA_TYPE, &config)),
        layers: vec![layer],
        manifests: None,
        annotations,
    };
    (manifest.to_bytes(), config)
}

/// Now, as RFC 3339 UTC to the second.
#[cfg_attr(not(feature = "oci"), allow(dead_code))]
pub(crate) fn now_rfc3339() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    rfc3339(secs)
}

/// `secs` since the epoch as RFC 3339 UTC.
#[cfg_attr(not(feature = "oci"), allow(dead_code))]
pub(crate) fn rfc3339(secs: u64) -> String {
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Howard Hinnant's civil_from_days.
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn knows_its_wit_version() {
        let wit = include_str!("../../../../wit/toolcage.wit");
        assert!(wit.contains(&format!("package toolcage:tool@{WIT_VERSION};")));
    }

    #[test]
    fn formats_dates() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_795_519_545), "2026-11-24T11:25:45Z");
    }

    #[test]
    fn names_what_it_found() {
        let reference: Reference = "oci://r.example/a:1".parse().unwrap();
        let (manifest, _) = component_artifact(b"\0asm", BTreeMap::new(), "2026-01-01T00:00:00Z");
        let manifest = Manifest::parse(&reference, &manifest).unwrap();
        assert!(manifest.component_layer(&reference).is_ok());
        let mut image = manifest.clone();
        image.config.as_mut().unwrap().media_type =
            "application/vnd.oci.image.config.v1+json".into();
        image.layers.push(image.layers[0].clone());
        let error = image.component_layer(&reference).unwrap_err().to_string();
        assert!(
            error.contains("application/vnd.oci.image.config.v1+json")
                && error.contains("[application/wasm, application/wasm]"),
            "{error}"
        );
    }
}
