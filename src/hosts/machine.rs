//! The host state machine of spec-controllers.md §1.3 as data: [`RULES`] is an ordered table of
//! (transition, source states, guard, destination, post action); the first rule whose transition and
//! source match and whose guard holds fires. No rule ⇒ an error, and the host is left untouched.

use jiff::{SignedDuration, Timestamp};

use super::validations::{self, Requirements};
use super::{Host, HostKind, HostStatus, Inventory, Progress};

/// What happened to a host.
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    RegisterHost { agent_version: String },
    BindHost { cluster_id: String },
    UnbindHost,
    ReclaimHost,
    RebootingForReclaim,
    ReclaimHostFailed,
    RefreshHost,
    MediaDisconnect,
    HostProgressChanged { stage: String, info: String },
    PrepareForInstallation,
    PreparingSucceeded,
    InstallHost,
    CancelInstallation,
    HostInstallationFailed,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TransitionType {
    RegisterHost,
    BindHost,
    UnbindHost,
    ReclaimHost,
    RebootingForReclaim,
    ReclaimHostFailed,
    RefreshHost,
    MediaDisconnect,
    HostProgressChanged,
    PrepareForInstallation,
    PreparingSucceeded,
    InstallHost,
    CancelInstallation,
    HostInstallationFailed,
}

impl Event {
    pub fn transition_type(&self) -> TransitionType {
        match self {
            Event::RegisterHost { .. } => TransitionType::RegisterHost,
            Event::BindHost { .. } => TransitionType::BindHost,
            Event::UnbindHost => TransitionType::UnbindHost,
            Event::ReclaimHost => TransitionType::ReclaimHost,
            Event::RebootingForReclaim => TransitionType::RebootingForReclaim,
            Event::ReclaimHostFailed => TransitionType::ReclaimHostFailed,
            Event::RefreshHost => TransitionType::RefreshHost,
            Event::MediaDisconnect => TransitionType::MediaDisconnect,
            Event::HostProgressChanged { .. } => TransitionType::HostProgressChanged,
            Event::PrepareForInstallation => TransitionType::PrepareForInstallation,
            Event::PreparingSucceeded => TransitionType::PreparingSucceeded,
            Event::InstallHost => TransitionType::InstallHost,
            Event::CancelInstallation => TransitionType::CancelInstallation,
            Event::HostInstallationFailed => TransitionType::HostInstallationFailed,
        }
    }
}

/// The world a transition is evaluated in.
#[derive(Clone, Debug)]
pub struct Context {
    pub now: Timestamp,
    /// `HOST_MAX_DISCONNECTION_TIME` (3 minutes).
    pub disconnection_timeout: SignedDuration,
    /// `ReclaimTimeout` (60 minutes).
    pub reclaim_timeout: SignedDuration,
    /// Status of the host's cluster, if it has one.
    pub cluster_status: Option<String>,
    pub requirements: Requirements,
}

impl Context {
    pub fn new(now: Timestamp) -> Context {
        Context {
            now,
            disconnection_timeout: SignedDuration::from_mins(3),
            reclaim_timeout: SignedDuration::from_mins(60),
            cluster_status: None,
            requirements: Requirements::default(),
        }
    }
}

#[derive(Debug, Clone, thiserror::Error, PartialEq)]
#[error("no {transition:?} transition from state {}", from.map(|s| s.as_str()).unwrap_or("(new)"))]
pub struct TransitionError {
    pub transition: TransitionType,
    pub from: Option<HostStatus>,
}

/// What a fired rule did.
#[derive(Debug, Clone, PartialEq)]
pub struct Fired {
    pub from: Option<HostStatus>,
    pub to: HostStatus,
}

/// Source of a rule: a state, or a host being created.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Src {
    New,
    S(HostStatus),
}

#[derive(Clone, Copy, Debug)]
pub enum Guard {
    Always,
    /// The host has no cluster.
    Unbound,
    Bound,
    NotConnected,
    /// Connected, and no (valid) inventory yet.
    ConnectedWithoutInventory,
    /// Connected with an inventory that fails a minimum requirement.
    ConnectedInsufficient,
    /// Connected with an inventory meeting every minimum requirement.
    ConnectedSufficient,
    ReclaimTimedOut,
    /// The host is past the point where it reboots from disk (a registration then means a wrong boot order).
    RebootedOrDay2Done,
    StageDone,
    StageDoneDay2,
    StageFailed,
    /// Any stage other than Done and Failed.
    StageInProgress,
    ClusterInErrorDay1,
    Day2,
}

#[derive(Clone, Copy, Debug)]
pub enum Dest {
    To(HostStatus),
    /// The rule matches but changes nothing (assisted's no-op rules).
    Stay,
}

#[derive(Clone, Copy, Debug)]
pub enum Post {
    None,
    /// PostRegisterHost: a fresh start for the agent.
    Register,
    /// Registration during installation: only the agent version.
    RegisterKeep,
    Bind,
    /// updateHostForUnbind.
    Unbind,
    Info(&'static str),
    WrongBootOrder,
    Progress,
    /// Inventory-based refresh: statusInfo from the validations.
    Validated,
}

pub struct Rule {
    pub transition: TransitionType,
    pub sources: &'static [Src],
    pub guard: Guard,
    pub dest: Dest,
    pub post: Post,
}

use HostStatus::*;
use Src::{New, S};
use TransitionType as T;

const INFO_DISCOVERING: &str = "Waiting for host to send hardware details";
const INFO_DISCONNECTED: &str = "Host has stopped communicating with the installation service";
const INFO_KNOWN_UNBOUND: &str = "Host is ready to be bound to a cluster";
const INFO_KNOWN: &str = "Host is ready to be installed";
pub const INFO_BINDING: &str = "Host is waiting to be bound to the cluster";
pub const INFO_UNBINDING: &str = "Host is waiting to be unbound from the cluster";
pub const INFO_RECLAIM_REBOOTING: &str = "Host is rebooting into the discovery image";

const POOL_REGISTER: &[Src] = &[
    S(DiscoveringUnbound),
    S(DisconnectedUnbound),
    S(InsufficientUnbound),
    S(KnownUnbound),
    S(Unbinding),
    S(UnbindingPendingUserAction),
    S(ReclaimingRebooting),
];
const BOUND_REGISTER: &[Src] = &[
    S(Discovering),
    S(Known),
    S(Disconnected),
    S(Insufficient),
    S(ResettingPendingUserAction),
    S(Binding),
    S(PendingForInput),
];
const BOUND_PRE_INSTALL: &[Src] = &[S(Known), S(Discovering), S(Disconnected), S(Insufficient), S(PendingForInput)];
const INSTALL_DONE_OR_FAILED: &[Src] = &[
    S(PreparingForInstallation),
    S(PreparingSuccessful),
    S(PreparingFailed),
    S(Installing),
    S(InstallingInProgress),
    S(InstallingPendingUserAction),
    S(Installed),
    S(AddedToExistingCluster),
    S(Error),
    S(Cancelled),
];
const POOL_REFRESH_DISCONNECT: &[Src] =
    &[S(DiscoveringUnbound), S(InsufficientUnbound), S(KnownUnbound), S(DisconnectedUnbound), S(Unbinding)];
const POOL_REFRESH_INVENTORY: &[Src] =
    &[S(DisconnectedUnbound), S(DiscoveringUnbound), S(InsufficientUnbound), S(KnownUnbound)];

const fn rule(transition: TransitionType, sources: &'static [Src], guard: Guard, dest: Dest, post: Post) -> Rule {
    Rule { transition, sources, guard, dest, post }
}

/// The transition table, in registration order (bound rules, then pool rules, as assisted registers
/// them into one machine).
pub static RULES: &[Rule] = &[
    // RegisterHost
    rule(T::RegisterHost, &[New], Guard::Unbound, Dest::To(DiscoveringUnbound), Post::Register),
    rule(T::RegisterHost, &[New], Guard::Bound, Dest::To(Discovering), Post::Register),
    rule(T::RegisterHost, POOL_REGISTER, Guard::Always, Dest::To(DiscoveringUnbound), Post::Register),
    rule(T::RegisterHost, BOUND_REGISTER, Guard::Always, Dest::To(Discovering), Post::Register),
    rule(
        T::RegisterHost,
        &[S(PreparingForInstallation), S(PreparingSuccessful)],
        Guard::Always,
        Dest::To(Known),
        Post::RegisterKeep,
    ),
    rule(
        T::RegisterHost,
        &[S(InstallingInProgress), S(InstallingPendingUserAction), S(AddedToExistingCluster)],
        Guard::RebootedOrDay2Done,
        Dest::To(InstallingPendingUserAction),
        Post::WrongBootOrder,
    ),
    rule(
        T::RegisterHost,
        &[S(Installing), S(InstallingInProgress)],
        Guard::Always,
        Dest::To(Error),
        Post::Info("The host unexpectedly restarted during the installation"),
    ),
    rule(T::RegisterHost, &[S(Error)], Guard::Always, Dest::Stay, Post::None),
    rule(T::RegisterHost, &[S(Installed)], Guard::Always, Dest::Stay, Post::None),
    // BindHost (pool): only a known-unbound host can be bound.
    rule(T::BindHost, &[S(KnownUnbound)], Guard::Always, Dest::To(Binding), Post::Bind),
    // UnbindHost
    rule(T::UnbindHost, BOUND_PRE_INSTALL, Guard::Always, Dest::To(Unbinding), Post::Unbind),
    rule(T::UnbindHost, INSTALL_DONE_OR_FAILED, Guard::Always, Dest::To(UnbindingPendingUserAction), Post::Unbind),
    // ReclaimHost
    rule(T::ReclaimHost, &[S(Installed), S(AddedToExistingCluster)], Guard::Always, Dest::To(Reclaiming), Post::Unbind),
    rule(T::ReclaimHost, BOUND_PRE_INSTALL, Guard::Always, Dest::To(Unbinding), Post::Unbind),
    rule(T::ReclaimHost, &[S(Error), S(Cancelled)], Guard::Always, Dest::To(UnbindingPendingUserAction), Post::Unbind),
    // Reclaim progress
    rule(
        T::RebootingForReclaim,
        &[S(Reclaiming)],
        Guard::Always,
        Dest::To(ReclaimingRebooting),
        Post::Info(INFO_RECLAIM_REBOOTING),
    ),
    rule(
        T::ReclaimHostFailed,
        &[S(Reclaiming), S(ReclaimingRebooting)],
        Guard::Always,
        Dest::To(UnbindingPendingUserAction),
        Post::Unbind,
    ),
    // RefreshHost: reclaim timeout
    rule(
        T::RefreshHost,
        &[S(Reclaiming), S(ReclaimingRebooting)],
        Guard::ReclaimTimedOut,
        Dest::To(UnbindingPendingUserAction),
        Post::Unbind,
    ),
    rule(T::RefreshHost, &[S(Reclaiming), S(ReclaimingRebooting)], Guard::Always, Dest::Stay, Post::None),
    // RefreshHost: bound hosts before installation
    rule(T::RefreshHost, BOUND_PRE_INSTALL, Guard::NotConnected, Dest::To(Disconnected), Post::Info(INFO_DISCONNECTED)),
    rule(
        T::RefreshHost,
        &[S(Disconnected), S(Discovering)],
        Guard::ConnectedWithoutInventory,
        Dest::To(Discovering),
        Post::Info(INFO_DISCOVERING),
    ),
    rule(T::RefreshHost, BOUND_PRE_INSTALL, Guard::ConnectedInsufficient, Dest::To(Insufficient), Post::Validated),
    rule(T::RefreshHost, BOUND_PRE_INSTALL, Guard::ConnectedSufficient, Dest::To(Known), Post::Info(INFO_KNOWN)),
    // RefreshHost: installed hosts of a failed day-1 cluster
    rule(
        T::RefreshHost,
        &[
            S(Installed),
            S(Installing),
            S(InstallingInProgress),
            S(InstallingPendingUserAction),
            S(ResettingPendingUserAction),
        ],
        Guard::ClusterInErrorDay1,
        Dest::To(Error),
        Post::Info("Host is part of a cluster that failed to install"),
    ),
    // RefreshHost: pool
    rule(
        T::RefreshHost,
        POOL_REFRESH_DISCONNECT,
        Guard::NotConnected,
        Dest::To(DisconnectedUnbound),
        Post::Info(INFO_DISCONNECTED),
    ),
    rule(
        T::RefreshHost,
        &[S(DisconnectedUnbound), S(DiscoveringUnbound)],
        Guard::ConnectedWithoutInventory,
        Dest::To(DiscoveringUnbound),
        Post::Info(INFO_DISCOVERING),
    ),
    rule(
        T::RefreshHost,
        POOL_REFRESH_INVENTORY,
        Guard::ConnectedInsufficient,
        Dest::To(InsufficientUnbound),
        Post::Validated,
    ),
    rule(
        T::RefreshHost,
        POOL_REFRESH_INVENTORY,
        Guard::ConnectedSufficient,
        Dest::To(KnownUnbound),
        Post::Info(INFO_KNOWN_UNBOUND),
    ),
    rule(T::RefreshHost, &[S(Binding), S(Unbinding)], Guard::Always, Dest::Stay, Post::None),
    // MediaDisconnect
    rule(
        T::MediaDisconnect,
        &[S(DiscoveringUnbound), S(InsufficientUnbound), S(KnownUnbound), S(DisconnectedUnbound), S(Unbinding)],
        Guard::Always,
        Dest::To(DisconnectedUnbound),
        Post::Info("Host lost the installation media"),
    ),
    rule(
        T::MediaDisconnect,
        &[S(Discovering), S(Known), S(Insufficient), S(Disconnected), S(PendingForInput), S(Binding)],
        Guard::Always,
        Dest::To(Disconnected),
        Post::Info("Host lost the installation media"),
    ),
    rule(
        T::MediaDisconnect,
        &[S(PreparingForInstallation), S(PreparingSuccessful), S(Installing), S(InstallingInProgress), S(Error)],
        Guard::Always,
        Dest::To(Error),
        Post::Info("Host lost the installation media during the installation"),
    ),
    // Installation flow
    rule(
        T::PrepareForInstallation,
        &[S(Known)],
        Guard::Always,
        Dest::To(PreparingForInstallation),
        Post::Info("Host is preparing for installation"),
    ),
    rule(
        T::PreparingSucceeded,
        &[S(PreparingForInstallation)],
        Guard::Always,
        Dest::To(PreparingSuccessful),
        Post::Info("Host finished successfully to prepare for installation"),
    ),
    rule(
        T::InstallHost,
        &[S(PreparingSuccessful)],
        Guard::Always,
        Dest::To(Installing),
        Post::Info("Installation is in progress"),
    ),
    // Day 2 hosts install on their own, without a cluster-wide preparation.
    rule(T::InstallHost, &[S(Known)], Guard::Day2, Dest::To(Installing), Post::Info("Installation is in progress")),
    rule(
        T::HostProgressChanged,
        &[S(Installing), S(InstallingInProgress), S(InstallingPendingUserAction)],
        Guard::StageDoneDay2,
        Dest::To(AddedToExistingCluster),
        Post::Progress,
    ),
    rule(
        T::HostProgressChanged,
        &[S(Installing), S(InstallingInProgress)],
        Guard::StageDone,
        Dest::To(Installed),
        Post::Progress,
    ),
    rule(
        T::HostProgressChanged,
        &[S(Installing), S(InstallingInProgress)],
        Guard::StageFailed,
        Dest::To(Error),
        Post::Progress,
    ),
    rule(
        T::HostProgressChanged,
        &[S(Installing), S(InstallingInProgress), S(InstallingPendingUserAction)],
        Guard::StageInProgress,
        Dest::To(InstallingInProgress),
        Post::Progress,
    ),
    rule(
        T::CancelInstallation,
        &[S(InstallingPendingUserAction), S(Installing), S(InstallingInProgress), S(Installed), S(Error)],
        Guard::Always,
        Dest::To(Cancelled),
        Post::Info("Installation cancelled by user"),
    ),
    rule(
        T::HostInstallationFailed,
        &[S(Installing), S(InstallingInProgress)],
        Guard::Always,
        Dest::To(Error),
        Post::Info("Installation failed"),
    ),
];

/// Host stages in the order an installation goes through them (swagger `host-stage`).
pub const STAGES: &[&str] = &[
    "Starting installation",
    "Waiting for control plane",
    "Waiting for bootkube",
    "Waiting for controller",
    "Installing",
    "Writing image to disk",
    "Copying registry data to disk",
    "Rebooting",
    "Waiting for ignition",
    "Configuring",
    "Joined",
    "Done",
];

/// Stages after which the node boots from its disk.
const POST_REBOOT_STAGES: &[&str] = &["Rebooting", "Waiting for ignition", "Configuring", "Joined", "Done"];

fn connected(host: &Host, ctx: &Context) -> bool {
    if POST_REBOOT_STAGES.contains(&host.progress.current_stage.as_str()) {
        return true;
    }
    let limit =
        ctx.disconnection_timeout + if host.bootstrap { SignedDuration::from_mins(2) } else { SignedDuration::ZERO };
    match host.checked_in_at {
        None => true,
        Some(t) => ctx.now.duration_since(t) <= limit,
    }
}

fn stage(event: &Event) -> &str {
    match event {
        Event::HostProgressChanged { stage, .. } => stage,
        _ => "",
    }
}

/// What the guards of one transition ask about a host's inventory, worked out once: validating the
/// inventory is the costly part of a refresh, and several rules ask (the inventory itself is parsed
/// once per text, see [`super::InventoryText`]).
struct Facts<'a> {
    host: &'a Host,
    ctx: &'a Context,
    validations: std::cell::OnceCell<Option<Vec<validations::Validation>>>,
}

impl<'a> Facts<'a> {
    fn new(host: &'a Host, ctx: &'a Context) -> Facts<'a> {
        Facts { host, ctx, validations: Default::default() }
    }
    fn inventory(&self) -> Option<&'a Inventory> {
        self.host.parsed_inventory()
    }
    fn validations(&self) -> Option<&[validations::Validation]> {
        self.validations
            .get_or_init(|| self.inventory().map(|inv| validations::validate(self.host, inv, &self.ctx.requirements)))
            .as_deref()
    }
    fn sufficient(&self) -> Option<bool> {
        self.validations().map(|v| v.iter().all(|v| v.passed))
    }
}

fn guard_holds(guard: Guard, facts: &Facts<'_>, event: &Event) -> bool {
    let (host, ctx) = (facts.host, facts.ctx);
    let inventory = || facts.inventory();
    let sufficient = || facts.sufficient();
    match guard {
        Guard::Always => true,
        Guard::Unbound => host.cluster_id.is_none(),
        Guard::Bound => host.cluster_id.is_some(),
        Guard::NotConnected => !connected(host, ctx),
        Guard::ConnectedWithoutInventory => connected(host, ctx) && inventory().is_none(),
        Guard::ConnectedInsufficient => connected(host, ctx) && sufficient() == Some(false),
        Guard::ConnectedSufficient => connected(host, ctx) && sufficient() == Some(true),
        Guard::ReclaimTimedOut => ctx.now.duration_since(host.status_updated_at) > ctx.reclaim_timeout,
        Guard::RebootedOrDay2Done => {
            host.progress.current_stage == "Rebooting"
                || (host.kind == HostKind::AddToExistingClusterHost && host.progress.current_stage == "Done")
        }
        Guard::StageDone => stage(event) == "Done" && host.kind == HostKind::Host,
        Guard::StageDoneDay2 => stage(event) == "Done" && host.kind == HostKind::AddToExistingClusterHost,
        Guard::StageFailed => stage(event) == "Failed",
        Guard::StageInProgress => !matches!(stage(event), "Done" | "Failed"),
        Guard::ClusterInErrorDay1 => host.kind == HostKind::Host && ctx.cluster_status.as_deref() == Some("error"),
        Guard::Day2 => host.kind == HostKind::AddToExistingClusterHost,
    }
}

/// Finds the rule for `event` from `from` (None: a host being created).
pub fn find_rule(host: &Host, from: Src, event: &Event, ctx: &Context) -> Option<&'static Rule> {
    find_rule_with(&Facts::new(host, ctx), from, event)
}

fn find_rule_with(facts: &Facts<'_>, from: Src, event: &Event) -> Option<&'static Rule> {
    let t = event.transition_type();
    RULES.iter().find(|r| r.transition == t && r.sources.contains(&from) && guard_holds(r.guard, facts, event))
}

/// Fires `event` on an existing host.
pub fn fire(host: &mut Host, event: &Event, ctx: &Context) -> Result<Fired, TransitionError> {
    apply(host, Src::S(host.status), event, ctx)
}

/// Fires the registration of a host that did not exist.
pub fn fire_new(host: &mut Host, event: &Event, ctx: &Context) -> Result<Fired, TransitionError> {
    apply(host, Src::New, event, ctx)
}

fn apply(host: &mut Host, from: Src, event: &Event, ctx: &Context) -> Result<Fired, TransitionError> {
    let from_status = match from {
        Src::New => None,
        Src::S(s) => Some(s),
    };
    let facts = Facts::new(host, ctx);
    let Some(rule) = find_rule_with(&facts, from, event) else {
        return Err(TransitionError { transition: event.transition_type(), from: from_status });
    };
    // Validations are recorded on every refresh of a host with an inventory (they are not cleared by
    // unbinding, spec-controllers.md §1.3).
    let validations_info = if matches!(event, Event::RefreshHost) && !matches!(rule.dest, Dest::Stay) {
        facts.validations().map(validations::info_json)
    } else {
        None
    };
    let insufficient_info = if matches!(rule.post, Post::Validated) {
        facts.validations().map(validations::insufficient_info)
    } else {
        None
    };
    drop(facts);
    if validations_info.is_some() {
        host.validations_info = validations_info;
    }
    let to = match rule.dest {
        Dest::To(s) => s,
        Dest::Stay => return Ok(Fired { from: from_status, to: host.status }),
    };
    post_action(rule.post, host, event, ctx, insufficient_info);
    if from_status != Some(to) {
        host.status_updated_at = ctx.now;
    }
    host.status = to;
    Ok(Fired { from: from_status, to })
}

fn post_action(post: Post, host: &mut Host, event: &Event, ctx: &Context, insufficient_info: Option<String>) {
    match post {
        Post::None => {}
        Post::Register => {
            if let Event::RegisterHost { agent_version } = event {
                host.discovery_agent_version = agent_version.clone();
            }
            host.inventory = None;
            host.progress = Progress::default();
            host.logs_info.clear();
            host.logs_collected_at = None;
            host.logs_sha256.clear();
            host.ntp_sources.clear();
            host.images_status.clear();
            host.not_reclaimed.clear();
            host.status_info = INFO_DISCOVERING.into();
        }
        Post::RegisterKeep => {
            if let Event::RegisterHost { agent_version } = event {
                host.discovery_agent_version = agent_version.clone();
            }
            host.status_info = "Host registered during installation preparation; preparing again".into();
        }
        Post::Bind => {
            if let Event::BindHost { cluster_id } = event {
                host.cluster_id = Some(cluster_id.clone());
            }
            host.progress = Progress::default();
            host.inventory = None;
            host.bootstrap = false;
            host.images_status.clear();
            host.not_reclaimed.clear();
            host.status_info = INFO_BINDING.into();
        }
        Post::Unbind => {
            host.status_info = INFO_UNBINDING.into();
            host.not_reclaimed.clear();
            host.progress = Progress::default();
            host.inventory = None;
            host.bootstrap = false;
            host.images_status.clear();
            host.logs_info.clear();
            host.logs_collected_at = None;
            host.logs_sha256.clear();
            host.cluster_id = None;
            host.kind = HostKind::Host;
            host.connectivity.clear();
            host.domain_name_resolutions.clear();
            host.free_addresses.clear();
            host.installation_disk_id.clear();
            host.installation_disk_path.clear();
            host.machine_config_pool_name.clear();
            host.role = "auto-assign".into();
            host.api_vip_connectivity.clear();
            host.suggested_role.clear();
        }
        Post::Info(info) => host.status_info = info.into(),
        Post::WrongBootOrder => {
            host.status_info = "Expected the host to boot from disk, but it booted the installation image - please reboot and fix boot order to boot from disk".into();
        }
        Post::Progress => {
            if let Event::HostProgressChanged { stage, info } = event {
                if host.progress.current_stage != *stage {
                    host.progress.stage_started_at = Some(ctx.now);
                }
                host.progress.current_stage = stage.clone();
                host.progress.progress_info = info.clone();
                host.progress.stage_updated_at = Some(ctx.now);
                host.progress.installation_percentage = match STAGES.iter().position(|s| s == stage) {
                    Some(i) => (i as i64 * 100) / (STAGES.len() as i64 - 1),
                    None => host.progress.installation_percentage,
                };
                host.status_info = if info.is_empty() { stage.clone() } else { format!("{stage}: {info}") };
            }
        }
        Post::Validated => {
            if let Some(info) = insufficient_info {
                host.status_info = info;
            }
        }
    }
}
