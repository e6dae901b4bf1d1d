//! The API's guards: tokens for resources and images, hostile inputs, tenant isolation, log lines,
//! cluster credentials uploads, the admission webhook, the eventsURLs.

mod admission_webhook;
mod cluster_credentials;
mod events;
mod hostile_inputs;
mod image_auth;
mod log_lines;
mod resource_auth;
mod tenant_isolation;
