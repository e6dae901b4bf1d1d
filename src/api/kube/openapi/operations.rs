//! The paths of each served kind, their operations and parameters.

use serde_json::{Value, json};

use super::schema::{META, kind_schema_name, list_schema_name};
use crate::api::kube::served::Served;

#[derive(Debug, Clone)]
pub(super) struct Param {
    pub(super) name: &'static str,
    pub(super) in_: &'static str,
    pub(super) ty: &'static str,
    pub(super) description: &'static str,
}

const fn q(name: &'static str, ty: &'static str, description: &'static str) -> Param {
    Param { name, in_: "query", ty, description }
}

pub(super) const PRETTY: Param = q("pretty", "string", "If 'true', the output is pretty-printed.");
const DRY_RUN: Param =
    q("dryRun", "string", "`All` to process the request (admission, validation) without persisting it.");
const FIELD_MANAGER: Param =
    q("fieldManager", "string", "Name of the actor making the change, recorded in managedFields.");
const FIELD_VALIDATION: Param = q(
    "fieldValidation",
    "string",
    "What to do with unknown or duplicate fields in the request body: `Ignore` (drop them silently), `Warn` (drop them and return a warning; the default), or `Strict` (reject the request).",
);
const FORCE: Param = q("force", "boolean", "Server-side apply only: take over fields owned by other managers.");
const LIST_PARAMS: &[Param] = &[
    q("allowWatchBookmarks", "boolean", "Watch only: ask for BOOKMARK events."),
    q("continue", "string", "Continue token from a previous page."),
    q("fieldSelector", "string", "Restrict the returned objects by their fields (`metadata.name=x`)."),
    q("labelSelector", "string", "Restrict the returned objects by their labels (`app=x,tier!=y`)."),
    q("limit", "integer", "Maximum number of items per page."),
    q("resourceVersion", "string", "Resource version to read at (list) or to watch from (watch)."),
    q("resourceVersionMatch", "string", "How resourceVersion applies to a list: `Exact` or `NotOlderThan`."),
    q("sendInitialEvents", "boolean", "Watch only: start with synthetic ADDED events for the current state."),
    q("timeoutSeconds", "integer", "Timeout of the list/watch call."),
    q("watch", "boolean", "Watch for changes instead of listing."),
];
const DELETE_PARAMS: &[Param] = &[
    DRY_RUN,
    q("gracePeriodSeconds", "integer", "Seconds before the object is deleted; 0 deletes immediately."),
    q(
        "ignoreStoreReadErrorWithClusterBreakingPotential",
        "boolean",
        "Delete an object whose stored form cannot be read.",
    ),
    q("orphanDependents", "boolean", "Deprecated: use propagationPolicy."),
    q("propagationPolicy", "string", "Garbage collection of dependents: `Orphan`, `Background` or `Foreground`."),
];

#[derive(Debug, Clone)]
pub(super) struct Op {
    pub(super) method: &'static str,
    pub(super) action: &'static str,
    pub(super) id: String,
    pub(super) description: String,
    pub(super) gvk: Value,
    pub(super) params: Vec<Param>,
    /// (schema name, content types, required)
    pub(super) body: Option<(String, Vec<&'static str>, bool)>,
    /// (code, description, schema name)
    pub(super) responses: Vec<(&'static str, &'static str, Option<String>)>,
    pub(super) list: bool,
}

/// Operation-id fragment of a group version: `CoreV1`,
/// `AgentInstallOpenshiftIoV1beta1`, `CoordinationV1`.
pub(super) fn gv_id(s: &Served) -> (String, String) {
    let g = if s.group.is_empty() {
        "core"
    } else {
        s.group.strip_suffix(".k8s.io").filter(|g| !g.contains('.')).unwrap_or(&s.group)
    };
    let mut camel = String::new();
    let mut tag = String::new();
    for (i, part) in g.split(['.', '-']).filter(|p| !p.is_empty()).enumerate() {
        let mut c = part.chars();
        let first = c.next().unwrap();
        let up: String = first.to_uppercase().chain(c.clone()).collect();
        camel.push_str(&up);
        if i == 0 {
            tag.push_str(part);
        } else {
            tag.push_str(&up);
        }
    }
    let mut v = s.version.chars();
    let vf = v.next().map(|c| c.to_uppercase().collect::<String>()).unwrap_or_default();
    (format!("{camel}{vf}{}", v.as_str()), format!("{tag}_{}", s.version))
}

fn article(kind: &str) -> &'static str {
    if kind.starts_with(['A', 'E', 'I', 'O', 'U']) { "an" } else { "a" }
}

/// Paths and their operations for one served kind (no deprecated watch
/// paths: watches are `?watch=true` on the list paths).
pub(super) fn kind_paths(s: &Served) -> Vec<(String, Vec<Op>)> {
    let (gv, _) = gv_id(s);
    let prefix = s.api_prefix();
    let ns = if s.namespaced { "Namespaced" } else { "" };
    let kind = &s.kind;
    let kind_ref = kind_schema_name(s);
    let list_ref = list_schema_name(s);
    let status = format!("{META}Status");
    let mut out = Vec::new();

    let mut patch_types =
        vec!["application/apply-patch+yaml", "application/json-patch+json", "application/merge-patch+json"];
    if is_builtin_kind(s) {
        patch_types.push("application/strategic-merge-patch+json");
    }

    let op = |method, action, id: String, description: String| Op {
        method,
        action,
        id,
        description,
        gvk: s.gvk_json(),
        params: vec![],
        body: None,
        responses: vec![],
        list: false,
    };
    let ok = |schema: &str| ("200", "OK", Some(schema.to_owned()));

    if s.namespaced && s.has_verb("list") {
        let mut o = op(
            "get",
            "list",
            format!("list{gv}{kind}ForAllNamespaces"),
            format!("list or watch objects of kind {kind}"),
        );
        o.params = LIST_PARAMS.to_vec();
        o.responses = vec![ok(&list_ref)];
        o.list = true;
        out.push((format!("{prefix}/{}", s.plural), vec![o]));
    }

    let collection = if s.namespaced {
        format!("{prefix}/namespaces/{{namespace}}/{}", s.plural)
    } else {
        format!("{prefix}/{}", s.plural)
    };
    let mut ops = Vec::new();
    if s.has_verb("list") {
        let mut o = op("get", "list", format!("list{gv}{ns}{kind}"), format!("list or watch objects of kind {kind}"));
        o.params = LIST_PARAMS.to_vec();
        o.responses = vec![ok(&list_ref)];
        o.list = true;
        ops.push(o);
    }
    if s.has_verb("create") {
        let mut o = op("post", "post", format!("create{gv}{ns}{kind}"), format!("create {} {kind}", article(kind)));
        o.params = vec![DRY_RUN, FIELD_MANAGER, FIELD_VALIDATION];
        o.body = Some((kind_ref.clone(), vec!["*/*"], true));
        o.responses = vec![
            ok(&kind_ref),
            ("201", "Created", Some(kind_ref.clone())),
            ("202", "Accepted", Some(kind_ref.clone())),
        ];
        ops.push(o);
    }
    if s.has_verb("deletecollection") {
        let mut o = op(
            "delete",
            "deletecollection",
            format!("delete{gv}Collection{ns}{kind}"),
            format!("delete collection of {kind}"),
        );
        o.params = DELETE_PARAMS.iter().chain(LIST_PARAMS.iter()).cloned().collect();
        o.params.dedup_by(|a, b| a.name == b.name);
        o.body = Some((format!("{META}DeleteOptions"), vec!["*/*"], false));
        o.responses = vec![ok(&status)];
        ops.push(o);
    }
    if !ops.is_empty() {
        out.push((collection.clone(), ops));
    }

    let item = format!("{collection}/{{name}}");
    let mut ops = Vec::new();
    if s.has_verb("get") {
        let mut o = op("get", "get", format!("read{gv}{ns}{kind}"), format!("read the specified {kind}"));
        o.responses = vec![ok(&kind_ref)];
        ops.push(o);
    }
    if s.has_verb("update") {
        let mut o = op("put", "put", format!("replace{gv}{ns}{kind}"), format!("replace the specified {kind}"));
        o.params = vec![DRY_RUN, FIELD_MANAGER, FIELD_VALIDATION];
        o.body = Some((kind_ref.clone(), vec!["*/*"], true));
        o.responses = vec![ok(&kind_ref), ("201", "Created", Some(kind_ref.clone()))];
        ops.push(o);
    }
    if s.has_verb("delete") {
        let mut o = op("delete", "delete", format!("delete{gv}{ns}{kind}"), format!("delete {} {kind}", article(kind)));
        o.params = DELETE_PARAMS.to_vec();
        o.body = Some((format!("{META}DeleteOptions"), vec!["*/*"], false));
        o.responses = vec![ok(&status), ("202", "Accepted", Some(status.clone()))];
        ops.push(o);
    }
    if s.has_verb("patch") {
        let mut o =
            op("patch", "patch", format!("patch{gv}{ns}{kind}"), format!("partially update the specified {kind}"));
        o.params = vec![DRY_RUN, FIELD_MANAGER, FIELD_VALIDATION, FORCE];
        o.body = Some((format!("{META}Patch"), patch_types.clone(), true));
        o.responses = vec![ok(&kind_ref), ("201", "Created", Some(kind_ref.clone()))];
        ops.push(o);
    }
    if !ops.is_empty() {
        out.push((item.clone(), ops));
    }

    for sub in &s.subresources {
        if sub == "scale" {
            continue; // no Scale schema published
        }
        let verbs = s.subresource_verbs(sub);
        let title: String = sub[..1].to_uppercase() + &sub[1..];
        let mut ops = Vec::new();
        if verbs.iter().any(|v| v == "get") {
            let mut o =
                op("get", "get", format!("read{gv}{ns}{kind}{title}"), format!("read {sub} of the specified {kind}"));
            o.responses = vec![ok(&kind_ref)];
            ops.push(o);
        }
        if verbs.iter().any(|v| v == "update") {
            let mut o = op(
                "put",
                "put",
                format!("replace{gv}{ns}{kind}{title}"),
                format!("replace {sub} of the specified {kind}"),
            );
            o.params = vec![DRY_RUN, FIELD_MANAGER, FIELD_VALIDATION];
            o.body = Some((kind_ref.clone(), vec!["*/*"], true));
            o.responses = vec![ok(&kind_ref), ("201", "Created", Some(kind_ref.clone()))];
            ops.push(o);
        }
        if verbs.iter().any(|v| v == "patch") {
            let mut o = op(
                "patch",
                "patch",
                format!("patch{gv}{ns}{kind}{title}"),
                format!("partially update {sub} of the specified {kind}"),
            );
            o.params = vec![DRY_RUN, FIELD_MANAGER, FIELD_VALIDATION, FORCE];
            o.body = Some((format!("{META}Patch"), patch_types.clone(), true));
            o.responses = vec![ok(&kind_ref), ("201", "Created", Some(kind_ref.clone()))];
            ops.push(o);
        }
        if !ops.is_empty() {
            out.push((format!("{item}/{sub}"), ops));
        }
    }
    out
}

/// Built-in kinds get strategic merge patch; CRs never do.
fn is_builtin_kind(s: &Served) -> bool {
    matches!(
        (s.group.as_str(), s.kind.as_str()),
        ("", "Secret") | ("", "Namespace") | ("", "Event") | ("coordination.k8s.io", "Lease")
    )
}

pub(super) fn path_params(path: &str, kind: &str) -> Vec<Value> {
    let mut v = Vec::new();
    if path.contains("{name}") {
        v.push(json!({"name": "name", "in": "path", "required": true,
                      "description": format!("name of the {kind}"),
                      "schema": {"type": "string", "uniqueItems": true}}));
    }
    if path.contains("{namespace}") {
        v.push(json!({"name": "namespace", "in": "path", "required": true,
                      "description": "object name and auth scope, such as for teams and projects",
                      "schema": {"type": "string", "uniqueItems": true}}));
    }
    v
}

#[cfg(test)]
mod tests {
    use super::super::super::served;
    use super::*;
    use crate::api::kube::served::testdata::our_crds;

    #[test]
    fn operation_ids() {
        let (id, tag) = gv_id(&served::from_crd(&our_crds()[1]));
        assert_eq!(id, "AgentInstallOpenshiftIoV1beta1");
        assert_eq!(tag, "agentInstallOpenshiftIo_v1beta1");
        assert_eq!(gv_id(&served::secret()).0, "CoreV1");
        assert_eq!(gv_id(&served::lease()).0, "CoordinationV1");
    }
}
