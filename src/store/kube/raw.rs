//! An object as a watch delivers it, kept as the JSON the API server sent: the cache stores that
//! text, so decoding each event into a typed or `DynamicObject` form (whose flattened `data` costs a
//! second pass and a copy) and encoding it back would be work for nothing. Only the metadata is
//! decoded, for the watcher's bookkeeping and the change announcements.

use std::borrow::Cow;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::{ApiResource, DynamicResourceScope};
use serde::{Deserialize, Deserializer};
use serde_json::Value;

#[derive(Clone, Debug)]
pub(super) struct RawObject {
    pub(super) metadata: ObjectMeta,
    pub(super) value: Value,
}

impl<'de> Deserialize<'de> for RawObject {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let value = Value::deserialize(d)?;
        let metadata = match value.get("metadata") {
            Some(m) => ObjectMeta::deserialize(m).map_err(serde::de::Error::custom)?,
            None => ObjectMeta::default(),
        };
        Ok(RawObject { metadata, value })
    }
}

impl kube::Resource for RawObject {
    type DynamicType = ApiResource;
    type Scope = DynamicResourceScope;

    fn group(dt: &ApiResource) -> Cow<'_, str> {
        dt.group.as_str().into()
    }

    fn version(dt: &ApiResource) -> Cow<'_, str> {
        dt.version.as_str().into()
    }

    fn kind(dt: &ApiResource) -> Cow<'_, str> {
        dt.kind.as_str().into()
    }

    fn api_version(dt: &ApiResource) -> Cow<'_, str> {
        dt.api_version.as_str().into()
    }

    fn plural(dt: &ApiResource) -> Cow<'_, str> {
        dt.plural.as_str().into()
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_object_is_kept_as_sent_with_its_metadata_decoded() {
        let text = r#"{"apiVersion":"v1","kind":"Secret","metadata":{"name":"s","namespace":"ns","resourceVersion":"7",
            "labels":{"a":"b"}},"data":{"k":"dg=="},"futureField":[1,2]}"#;
        let raw: RawObject = serde_json::from_str(text).unwrap();
        assert_eq!(raw.metadata.name.as_deref(), Some("s"));
        assert_eq!(raw.metadata.resource_version.as_deref(), Some("7"));
        assert_eq!(raw.value, serde_json::from_str::<Value>(text).unwrap());
        assert!(serde_json::from_str::<RawObject>(r#"{"metadata":{"name":3}}"#).is_err());
    }
}
