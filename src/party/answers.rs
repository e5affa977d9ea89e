//! Who may answer a call asked of people (an approval, an interactive tool), one rule for
//! every route that answers one: the gateway's answer route (the console and chat use it),
//! an A2A message on the task, and `agentfleet approve|deny|answer`.
//!
//! - A call's **approvers** are the subjects of the first `spec.tools.approvers` rule whose
//!   patterns match its tool (`human:ID`, `group:NAME`), recorded with the call when it is
//!   asked; with none, **the humans of the space it was asked in**.
//! - An **outside caller never approves** a call asked in its own conversation (the call its
//!   own message provoked), whatever the list says; so in a conversation an approval needs a
//!   named approver, and without one it is refused at once rather than asked.
//! - An interactive tool asks for data, not consent: by default its answer is the party's
//!   own, so an outside caller answers what its conversation asks.
//!
//! Tool patterns match tool names without regard to case, `*` standing for any run of
//! characters, so `requireApproval: [refund]` covers a remote skill `Refund`.

use std::fmt;

use crate::store::{CallKind, CallRecord, MemberKind, Sender, SpaceRecord};

/// A human id: what a token file's humans and a Space's people are called (a Space's
/// members may also be written as Kubernetes usernames, groups and ServiceAccounts, which
/// [`crate::cluster_users`] turns into these). A colon is never part of one: `service:ID`,
/// `group:NAME` and the like are reserved forms, so no person can pose as a service or a
/// group.
pub const HUMAN_ID_PATTERN: &str = r"^[A-Za-z0-9][-A-Za-z0-9_.@]*$";

/// The longest human id.
pub const MAX_HUMAN_ID: usize = 128;

/// Whether `id` may name a person (see [`HUMAN_ID_PATTERN`]).
pub fn is_human_id(id: &str) -> bool {
    let mut bytes = id.bytes();
    id.len() <= MAX_HUMAN_ID
        && bytes.next().is_some_and(|b| b.is_ascii_alphanumeric())
        && bytes.all(|b| b.is_ascii_alphanumeric() || b"-_.@".contains(&b))
}

/// What kind of principal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PrincipalKind {
    /// A person.
    Human,
    /// A program.
    Service,
}

/// Who is acting: a person or a service, as the gateway's tokens (or the command line's
/// `--as`) know them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Principal {
    /// A person or a program.
    pub kind: PrincipalKind,
    /// A human's member id, or a service's name.
    pub id: String,
    /// How people see it.
    pub name: String,
    /// The groups a person belongs to (approver lists may name them).
    pub groups: Vec<String>,
}

impl Principal {
    /// A person with no groups (the command line's `--as`).
    pub fn human(id: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            kind: PrincipalKind::Human,
            id: id.into(),
            name: name.into(),
            groups: Vec::new(),
        }
    }

    /// Its id as a member of an A2A conversation: a person by its id, a service as
    /// `service:ID` (a form no person's id can take).
    pub fn caller_id(&self) -> String {
        match self.kind {
            PrincipalKind::Human => self.id.clone(),
            PrincipalKind::Service => format!("service:{}", self.id),
        }
    }

    /// It as the member of its A2A conversations: of the kind that waits for answers
    /// (humans), so the agent answers it as it answers people.
    pub fn caller(&self) -> Sender {
        Sender {
            groups: Vec::new(),
            id: self.caller_id(),
            name: self.name.clone(),
            kind: Some(MemberKind::Human),
        }
    }

    /// Whether it is one of the humans of `space` (for a service: the caller of that
    /// conversation).
    fn is_human_of(&self, space: &SpaceRecord) -> bool {
        // A person whose id takes a reserved form is nobody (the token file refuses one).
        if self.kind == PrincipalKind::Human && !is_human_id(&self.id) {
            return false;
        }
        let id = self.caller_id();
        space
            .members
            .iter()
            .any(|m| m.kind == MemberKind::Human && m.id == id)
    }
}

/// Who an approver list names: a person or a group of people.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Subject {
    /// `human:ID`.
    Human(String),
    /// `group:NAME` (the groups of the gateway's token file).
    Group(String),
}

impl Subject {
    /// Reads `human:ID` or `group:NAME`, or says why it is neither.
    pub fn parse(s: &str) -> Result<Self, String> {
        match s.split_once(':') {
            Some(("human", id)) if is_human_id(id) => Ok(Subject::Human(id.into())),
            Some(("group", g))
                if !g.is_empty()
                    && g.chars().count() <= 256
                    && !g.contains(char::is_whitespace) =>
            {
                Ok(Subject::Group(g.into()))
            }
            _ => Err(format!(
                "{s:?} is not human:ID (a Space member's id) or group:NAME"
            )),
        }
    }

    /// Whether `who` is it.
    pub fn includes(&self, who: &Principal) -> bool {
        match self {
            Subject::Human(id) => who.kind == PrincipalKind::Human && who.id == *id,
            Subject::Group(g) => who.kind == PrincipalKind::Human && who.groups.contains(g),
        }
    }
}

/// Whether a tool pattern matches `name`: ignoring case, `*` standing for any run of
/// characters (none included).
pub fn tool_matches(pattern: &str, name: &str) -> bool {
    if !pattern.contains('*') {
        return pattern.to_lowercase() == name.to_lowercase();
    }
    let p: Vec<char> = pattern.chars().flat_map(char::to_lowercase).collect();
    let n: Vec<char> = name.chars().flat_map(char::to_lowercase).collect();
    // Greedy glob with backtracking to the last star: linear in practice, never worse than
    // |p| × |n|.
    let (mut i, mut j) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while j < n.len() {
        if i < p.len() && p[i] != '*' && p[i] == n[j] {
            i += 1;
            j += 1;
        } else if i < p.len() && p[i] == '*' {
            star = Some((i, j));
            i += 1;
        } else if let Some((si, sj)) = star {
            i = si + 1;
            j = sj + 1;
            star = Some((si, sj + 1));
        } else {
            return false;
        }
    }
    p[i..].iter().all(|c| *c == '*')
}

/// The approvers of a call of `tool`: the subjects of the first rule whose patterns match it
/// (empty: none named, the default applies).
pub fn approvers_for(rules: &[crate::crd::ApproverRule], tool: &str) -> Vec<String> {
    rules
        .iter()
        .find(|r| r.tools.iter().any(|p| tool_matches(p, tool)))
        .map(|r| r.subjects.clone())
        .unwrap_or_default()
}

/// Whether a call of `kind` with these `approvers` can be answered by anyone when it is
/// asked of an outside caller's conversation (`outside`): an approval there needs a named
/// approver, since the caller never approves its own.
pub fn answerable(kind: CallKind, outside: bool, approvers: &[String]) -> bool {
    !(outside && kind == CallKind::Approval && approvers.is_empty())
}

/// What the patterns of `spec` that name tools for approval (`tools.mcp[].requireApproval`,
/// `tools.a2a[].requireApproval`, `tools.approvers[].tools`) match none of, among the tools
/// the worker reports (`tools`): one sentence each. A server or remote agent none of whose
/// tools can be called now is not judged (its tools are not known).
pub fn unmatched_patterns(
    spec: &crate::crd::ToolsSpec,
    tools: &[crate::crd::ToolStatus],
) -> Vec<String> {
    let known = |source: &str| tools.iter().any(|t| t.source == source && t.ready);
    // Each name lowered once: every pattern is tried against every tool.
    let names: Vec<(&str, String)> = tools
        .iter()
        .map(|t| (t.source.as_str(), t.name.to_lowercase()))
        .collect();
    let any = |source: Option<&str>, pattern: &str| {
        let pattern = pattern.to_lowercase();
        names
            .iter()
            .filter(|(s, _)| source.is_none_or(|want| *s == want))
            .any(|(_, name)| tool_matches(&pattern, name))
    };
    let mut out = Vec::new();
    let sources = spec
        .mcp
        .iter()
        .map(|m| ("mcp", &m.name, &m.require_approval))
        .chain(
            spec.a2a
                .iter()
                .map(|a| ("a2a", &a.name, &a.require_approval)),
        );
    for (kind, name, patterns) in sources {
        let source = format!("{kind}:{name}");
        if !known(&source) {
            continue;
        }
        for p in patterns {
            if !any(Some(&source), &crate::names::prefixed_tool(name, p, true)) {
                out.push(format!(
                    "tools.{kind}[{name}].requireApproval: {p:?} matches no tool it offers"
                ));
            }
        }
    }
    for (i, rule) in spec.approvers.iter().enumerate() {
        for p in &rule.tools {
            if !any(None, p) {
                out.push(format!(
                    "tools.approvers[{i}].tools: {p:?} matches no tool the agent has"
                ));
            }
        }
    }
    out
}

/// Why someone may not answer a call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NotAllowed {
    /// An outside caller approving the call its own conversation provoked.
    OwnCall,
    /// Not among the call's approvers (or, with none named, not a human of its space).
    NotApprover {
        /// Who may, in words.
        who: String,
    },
}

impl fmt::Display for NotAllowed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NotAllowed::OwnCall => f.write_str(
                "a caller cannot approve a call that its own conversation provoked: one of the agent's approvers must",
            ),
            NotAllowed::NotApprover { who } => write!(f, "only {who} may answer this call"),
        }
    }
}

/// Who may answer a call, in words ("human:dana or group:finance", "the humans of space
/// desk").
pub fn approvers_text(record: &CallRecord, space: &str) -> String {
    if record.approvers.is_empty() {
        format!("the humans of space {space}")
    } else {
        record.approvers.join(" or ")
    }
}

/// Whether `record` names `who` among its approvers (not by default): such a person may
/// answer it without being a member of the space it was asked in (of which they see nothing
/// else).
pub fn names(record: &CallRecord, who: &Principal) -> bool {
    record
        .approvers
        .iter()
        .filter_map(|s| Subject::parse(s).ok())
        .any(|s| s.includes(who))
}

/// Whether `who` may answer `record`, a call asked in `space` (its record, as the data plane
/// holds it; `None`: gone, so only named approvers may).
pub fn may_answer(
    record: &CallRecord,
    space_name: &str,
    space: Option<&SpaceRecord>,
    who: &Principal,
) -> Result<(), NotAllowed> {
    let in_conversation = crate::identity::is_conversation(space_name);
    if record.kind == CallKind::Approval
        && in_conversation
        && space.is_some_and(|s| who.is_human_of(s))
    {
        return Err(NotAllowed::OwnCall);
    }
    let allowed = if record.approvers.is_empty() {
        space.is_some_and(|s| who.is_human_of(s))
    } else {
        names(record, who)
    };
    if allowed {
        Ok(())
    } else {
        Err(NotAllowed::NotApprover {
            who: approvers_text(record, space_name),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{Member, V1};

    #[test]
    fn patterns_ignore_case_and_take_stars() {
        for (p, n, want) in [
            ("refund", "refund", true),
            ("refund", "Refund", true),
            ("REFUND", "refund", true),
            ("refund", "refunds", false),
            ("billing__*", "billing__Refund", true),
            ("*refund*", "billing__refund_all", true),
            ("*", "anything", true),
            ("re*nd", "refund", true),
            ("re*nd", "refunded", false),
            ("a*b*c", "aXbYc", true),
            ("a*b*c", "aXcYb", false),
            ("", "", true),
            ("", "x", false),
        ] {
            assert_eq!(tool_matches(p, n), want, "{p} {n}");
        }
    }

    #[test]
    fn human_ids_never_take_a_reserved_form() {
        for id in ["husam", "dana.k", "a@b.c", "x-1_2"] {
            assert!(is_human_id(id), "{id}");
        }
        for id in [
            "service:probe",
            "group:x",
            "",
            "-a",
            "a b",
            "a/b",
            &"a".repeat(129),
        ] {
            assert!(!is_human_id(id), "{id}");
        }
    }

    #[test]
    fn the_crd_schema_and_this_rule_name_humans_alike() {
        let crd = serde_json::to_string(&<crate::crd::Space as kube::CustomResourceExt>::crd())
            .unwrap_or_default();
        // A member's id is a human id, or what the one rule of `cluster_users` reads as one:
        // a username's `:` and a ServiceAccount's `NAMESPACE/`.
        let widened = HUMAN_ID_PATTERN.replace("_.@]", "_.@:/]");
        let escaped = serde_json::to_string(&widened).unwrap_or_default();
        assert!(
            crd.contains(&escaped),
            "the Space schema's member id pattern changed"
        );
    }

    fn space(humans: &[&str]) -> SpaceRecord {
        SpaceRecord {
            v: V1,
            display_name: "x".into(),
            members: std::iter::once(Member {
                kind: MemberKind::Agent,
                id: "gated".into(),
                name: "gated".into(),
            })
            .chain(humans.iter().map(|h| Member {
                kind: MemberKind::Human,
                id: h.to_string(),
                name: h.to_string(),
            }))
            .collect(),
            groups: Vec::new(),
            max_messages: 10,
            max_message_bytes: crate::store::DEFAULT_MAX_MESSAGE_BYTES,
            loop_guard: Default::default(),
            context_id: None,
        }
    }

    fn record(kind: CallKind, approvers: &[&str]) -> CallRecord {
        CallRecord {
            tool: "refund".into(),
            kind,
            token_hash: String::new(),
            since_ms: 0,
            expires_ms: i64::MAX,
            space: Some("team".into()),
            arguments: None,
            result_schema: None,
            depth: 0,
            remote: None,
            approvers: approvers.iter().map(|s| s.to_string()).collect(),
            conversation: None,
        }
    }

    #[test]
    fn who_may_answer_a_call() {
        let team = space(&["husam", "dana"]);
        let conv = space(&["service:crm"]);
        let husam = Principal::human("husam", "Husam");
        let mut finance = Principal::human("fatima", "Fatima");
        finance.groups = vec!["finance".into()];
        let stranger = Principal::human("eve", "Eve");
        let crm = Principal {
            kind: PrincipalKind::Service,
            id: "crm".into(),
            name: "crm".into(),
            groups: Vec::new(),
        };
        // A human token posing as the service reads as another caller altogether.
        let posing = Principal::human("service:crm", "x");
        use CallKind::*;
        let table: Vec<(&str, CallRecord, &str, &SpaceRecord, &Principal, bool)> = vec![
            (
                "default: a human of the space",
                record(Approval, &[]),
                "team",
                &team,
                &husam,
                true,
            ),
            (
                "default: not a human of the space",
                record(Approval, &[]),
                "team",
                &team,
                &stranger,
                false,
            ),
            (
                "default: a service never",
                record(Approval, &[]),
                "team",
                &team,
                &crm,
                false,
            ),
            (
                "named: by group",
                record(Approval, &["group:finance"]),
                "team",
                &team,
                &finance,
                true,
            ),
            (
                "named: a member not named",
                record(Approval, &["group:finance"]),
                "team",
                &team,
                &husam,
                false,
            ),
            (
                "named: by id",
                record(Approval, &["human:eve"]),
                "team",
                &team,
                &stranger,
                true,
            ),
            (
                "conversation: the caller never approves",
                record(Approval, &[]),
                "a2a_1",
                &conv,
                &crm,
                false,
            ),
            (
                "conversation: not even when named",
                record(Approval, &["human:service:crm", "group:finance"]),
                "a2a_1",
                &conv,
                &crm,
                false,
            ),
            (
                "conversation: a named approver does",
                record(Approval, &["group:finance"]),
                "a2a_1",
                &conv,
                &finance,
                true,
            ),
            (
                "conversation: an interactive call is the caller's",
                record(Interactive, &[]),
                "a2a_1",
                &conv,
                &crm,
                true,
            ),
            (
                "conversation: a posing human is nobody",
                record(Interactive, &[]),
                "a2a_1",
                &conv,
                &posing,
                false,
            ),
            (
                "interactive: named answerers only",
                record(Interactive, &["human:dana"]),
                "team",
                &team,
                &husam,
                false,
            ),
        ];
        for (what, record, name, space, who, want) in table {
            assert_eq!(
                may_answer(&record, name, Some(space), who).is_ok(),
                want,
                "{what}"
            );
        }
        assert_eq!(
            may_answer(&record(Approval, &[]), "a2a_1", Some(&conv), &crm),
            Err(NotAllowed::OwnCall)
        );
        assert!(!answerable(Approval, true, &[]));
        assert!(answerable(Approval, true, &["group:finance".into()]));
        assert!(answerable(Interactive, true, &[]));
        assert!(answerable(Approval, false, &[]));
    }

    #[test]
    fn patterns_that_match_no_tool_are_named() {
        let spec: crate::crd::ToolsSpec = serde_yaml::from_str(
            "{mcp: [{name: tracker, url: 'http://t', requireApproval: [Create_Issue, 'delete_*', merge]}, {name: down, url: 'http://d', requireApproval: [x]}], a2a: [{name: billing, url: 'http://b', requireApproval: [refund, refnd]}], approvers: [{tools: ['billing__*', ghost], subjects: ['human:dana']}]}",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let tool = |name: &str, source: &str, ready: bool| crate::crd::ToolStatus {
            name: name.into(),
            source: source.into(),
            ready,
            ..Default::default()
        };
        let tools = [
            tool("tracker__create_issue", "mcp:tracker", true),
            tool("tracker__delete_all", "mcp:tracker", true),
            tool("down__*", "mcp:down", false),
            tool("billing__Refund", "a2a:billing", true),
        ];
        assert_eq!(
            unmatched_patterns(&spec, &tools),
            [
                "tools.mcp[tracker].requireApproval: \"merge\" matches no tool it offers",
                "tools.a2a[billing].requireApproval: \"refnd\" matches no tool it offers",
                "tools.approvers[0].tools: \"ghost\" matches no tool the agent has",
            ]
        );
    }

    #[test]
    fn subjects_are_humans_or_groups() {
        assert_eq!(
            Subject::parse("human:dana"),
            Ok(Subject::Human("dana".into()))
        );
        assert_eq!(
            Subject::parse("group:sre"),
            Ok(Subject::Group("sre".into()))
        );
        for bad in [
            "dana",
            "service:crm",
            "human:",
            "human:service:crm",
            "group:",
            "group:a b",
        ] {
            assert!(Subject::parse(bad).is_err(), "{bad}");
        }
    }
}
