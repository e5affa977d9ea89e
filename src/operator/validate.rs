//! What the schema cannot refuse in an Agent's spec: rules across fields (tool names against
//! each other, phases against the tools, URL placeholders against the input schema, the
//! checkpoint a restore or a fork names). The
//! reconcile turns the problems into `Ready=False (InvalidSpec)` and leaves the worker as it
//! was; `agentfleet dev` refuses to start with them.

use std::collections::BTreeSet;

use serde_json::Value;

use crate::crd::{
    AgentSpec, BuiltinTool, ConsciousnessSpec, HttpToolSpec, McpServerSpec, ToolsSpec,
};

/// The longest Agent name: children are named `<agent>-worker` and labelled with the name,
/// and label values hold at most 63 characters.
pub const MAX_NAME_LEN: usize = 52;

/// What separates an MCP server's name from its tools' names (`SERVER__TOOL`).
pub const MCP_SEPARATOR: &str = "__";

/// The largest spec the worker's ConfigMap holds once rendered (a ConfigMap holds 1 MiB; the
/// rest is room for the manifest's metadata).
pub const MAX_RENDERED_SPEC_BYTES: usize = 1024 * 1024 - 16 * 1024;

/// Problems with a spec that the schema cannot refuse.
pub fn validate(name: &str, spec: &AgentSpec) -> Vec<String> {
    let mut problems = Vec::new();
    if name.len() > MAX_NAME_LEN {
        problems.push(format!(
            "name is {} characters; at most {MAX_NAME_LEN} fit in the worker's labels",
            name.len()
        ));
    }
    tool_names(&spec.tools, &mut problems);
    for (i, tool) in spec.tools.http.iter().enumerate() {
        http_tool(i, tool, &mut problems);
    }
    for (i, phase) in spec.cycle.phases.iter().enumerate() {
        if phase.to_step.is_some_and(|to| to < phase.from_step) {
            problems.push(format!(
                "cycle.phases[{i}] ends (step {}) before it starts (step {})",
                phase.to_step.unwrap_or_default(),
                phase.from_step
            ));
        }
        for tool in phase.active_tools.iter().flatten() {
            if let Err(why) = names_a_tool(&spec.tools, tool) {
                problems.push(format!(
                    "cycle.phases[{i}].activeTools names {tool:?}: {why}"
                ));
            }
        }
    }
    for (i, plan) in spec.plans.iter().enumerate() {
        if let Err(e) = crate::plans::schedule(plan) {
            problems.push(format!("plans[{i}]: {e}"));
        }
    }
    for env in &spec.worker.env {
        if env.name.starts_with("AGENTFLEET_") {
            problems.push(format!(
                "worker.env {} uses the reserved prefix AGENTFLEET_",
                env.name
            ));
        }
    }
    consciousness(name, &spec.consciousness, &mut problems);
    rendered_size(spec, &mut problems);
    problems
}

/// The spec fits the ConfigMap the worker reads it from; else the problem names the largest
/// of its fields.
fn rendered_size(spec: &AgentSpec, problems: &mut Vec<String>) {
    let total = serde_yaml::to_string(spec).map_or(0, |t| t.len());
    if total <= MAX_RENDERED_SPEC_BYTES {
        return;
    }
    let fields = serde_json::to_value(spec).ok();
    let largest = fields.as_ref().and_then(Value::as_object).and_then(|o| {
        o.iter()
            .map(|(k, v)| (k, serde_yaml::to_string(v).map_or(0, |t| t.len())))
            .max_by_key(|(_, n)| *n)
    });
    let at = largest
        .map(|(field, n)| format!(" (spec.{field} alone is {n} bytes)"))
        .unwrap_or_default();
    problems.push(format!(
        "the spec is {total} bytes rendered{at}; the worker reads it from a ConfigMap, which holds at most {MAX_RENDERED_SPEC_BYTES} of it"
    ));
}

/// The checkpoint `restore` names (exactly one of a cycle and a reference: an archive's URL
/// or the data plane's own), the Agent `seedFrom` copies (another one, by a valid name), and
/// an archive prefix that stays inside the archive.
fn consciousness(name: &str, spec: &ConsciousnessSpec, problems: &mut Vec<String>) {
    if let Some(restore) = &spec.restore {
        match (restore.cycle, restore.storage_ref.as_deref()) {
            (Some(_), Some(_)) | (None, None) => problems
                .push("consciousness.restore: give exactly one of cycle and storageRef".into()),
            (None, Some(reference)) => {
                if let (Err(e), None) = (
                    crate::archive::check_url(reference),
                    crate::store::checkpoint_ref_cycle(reference),
                ) {
                    let why = match e {
                        crate::archive::ArchiveError::InvalidUrl { why, .. } => why,
                        other => other.to_string(),
                    };
                    problems.push(format!(
                        "consciousness.restore.storageRef {:?} is neither an archived checkpoint's URL (s3://, gs://, az://, file:///…: {why}) nor the data plane's checkpoint reference (redis:…#cycle=N, as status.checkpoint.storageRef shows it)",
                        crate::names::shorten(reference)
                    ));
                }
            }
            (Some(_), None) => {}
        }
    }
    if let Some(seed) = &spec.seed_from {
        if let Some(p) = crate::names::object_name_problem(&seed.agent) {
            problems.push(format!("consciousness.seedFrom.agent: {p}"));
        } else if seed.agent == name {
            problems.push(format!(
                "consciousness.seedFrom.agent {:?} is this Agent: a fork copies another Agent's checkpoint (use restore to roll back)",
                seed.agent
            ));
        }
    }
    if let Some(prefix) = &spec.archive.prefix {
        if prefix.split('/').any(|segment| segment == "..") {
            problems.push(format!(
                "consciousness.archive.prefix {:?} has a '..' segment: a prefix stays inside the archive",
                crate::names::shorten(prefix)
            ));
        }
    }
}

/// Every name the model calls a tool by is one tool's: HTTP and interactive tools unique and
/// not a built-in's name, MCP servers unique, no such tool inside a server's `NAME__` prefix,
/// no server inside another's; a server's `requireApproval` names tools of its allowlist.
fn tool_names(tools: &ToolsSpec, problems: &mut Vec<String>) {
    let mut seen = BTreeSet::new();
    let named = tools
        .http
        .iter()
        .enumerate()
        .map(|(i, t)| (format!("tools.http[{i}].name"), &t.name))
        .chain(
            tools
                .interactive
                .iter()
                .enumerate()
                .map(|(i, t)| (format!("tools.interactive[{i}].name"), &t.name)),
        );
    for (field, name) in named {
        if BuiltinTool::from_name(name).is_some() {
            problems.push(format!("{field} {name:?} is the name of a built-in tool"));
        }
        if !seen.insert(name.as_str()) {
            problems.push(format!(
                "{field} {name:?} is used by another HTTP or interactive tool"
            ));
        }
        if let Some(server) = server_of(&tools.mcp, name) {
            problems.push(format!(
                "{field} {name:?} is inside the prefix {}{MCP_SEPARATOR} of MCP server {:?}'s tools",
                server.name, server.name
            ));
        }
    }
    for (i, s) in tools.mcp.iter().enumerate() {
        for t in &s.require_approval {
            // A pattern (any case, `*`) must match a tool the allowlist lets through.
            if !s.tools.is_empty() && !s.tools.iter().any(|a| crate::party::tool_matches(t, a)) {
                problems.push(format!(
                    "tools.mcp[{i}].requireApproval names {t:?}, which its tools allowlist does not allow"
                ));
            }
        }
    }
    let mut servers = BTreeSet::new();
    for (i, s) in tools.mcp.iter().enumerate() {
        if !servers.insert(s.name.as_str()) {
            problems.push(format!(
                "tools.mcp[{i}].name {:?} is used by another MCP server",
                s.name
            ));
        }
        let prefix = format!("{}{MCP_SEPARATOR}", s.name);
        if let Some(other) = tools
            .mcp
            .iter()
            .find(|o| o.name != s.name && o.name.starts_with(&prefix))
        {
            problems.push(format!(
                "tools.mcp[{i}].name {:?}: the tools of MCP server {:?} would be inside its prefix {prefix}",
                s.name, other.name
            ));
        }
    }
    for (i, a) in tools.a2a.iter().enumerate() {
        if !servers.insert(a.name.as_str()) {
            problems.push(format!(
                "tools.a2a[{i}].name {:?} is used by another MCP server or A2A agent",
                a.name
            ));
        }
    }
}

/// The declared MCP server whose `NAME__` prefix `tool` starts with.
fn server_of<'a>(servers: &'a [McpServerSpec], tool: &str) -> Option<&'a McpServerSpec> {
    servers.iter().find(|s| {
        tool.strip_prefix(s.name.as_str())
            .is_some_and(|rest| rest.starts_with(MCP_SEPARATOR))
    })
}

/// Whether a phase's `activeTools` entry names a tool of the agent: an enabled built-in, an
/// HTTP tool, `SERVER__TOOL` of a declared server (in its allowlist, when it has one), or
/// `SERVER__*` (every tool of the server).
fn names_a_tool(tools: &ToolsSpec, name: &str) -> Result<(), String> {
    if tools.builtin.iter().any(|t| t.name() == name) {
        return Ok(());
    }
    if BuiltinTool::from_name(name).is_some() {
        return Err("a built-in tool that tools.builtin does not enable".into());
    }
    if tools.http.iter().any(|t| t.name == name) || tools.interactive.iter().any(|t| t.name == name)
    {
        return Ok(());
    }
    if tools.a2a.iter().any(|a| {
        name.strip_prefix(a.name.as_str())
            .and_then(|rest| rest.strip_prefix(MCP_SEPARATOR))
            .is_some_and(|skill| !skill.is_empty())
    }) {
        // Its skills are known only from its card, when the worker reads it.
        return Ok(());
    }
    if let Some(server) = server_of(&tools.mcp, name) {
        let tool = &name[server.name.len() + MCP_SEPARATOR.len()..];
        return if tool.is_empty() {
            Err(format!(
                "no tool of MCP server {:?} after its prefix",
                server.name
            ))
        } else if tool == "*" || server.tools.is_empty() || server.tools.iter().any(|t| t == tool) {
            Ok(())
        } else {
            Err(format!(
                "MCP server {:?} allows only {}",
                server.name,
                server.tools.join(", ")
            ))
        };
    }
    Err("not a tool of this agent (a built-in, an HTTP or interactive tool, SERVER__TOOL or SERVER__* of an MCP server)".into())
}

/// An HTTP tool's input schema is an object schema, and every `{x}` of its URL names one of
/// the schema's properties (when it declares them).
fn http_tool(i: usize, tool: &HttpToolSpec, problems: &mut Vec<String>) {
    let at = format!("tools.http[{i}] ({})", tool.name);
    let schema = &tool.input_schema;
    if schema.get("type").and_then(Value::as_str) != Some("object") {
        problems.push(format!(
            "{at}: inputSchema must be an object schema (type: object)"
        ));
    }
    let properties = match schema.get("properties") {
        None => None,
        Some(Value::Object(p)) => Some(p),
        Some(_) => {
            problems.push(format!("{at}: inputSchema.properties must be an object"));
            None
        }
    };
    match schema.get("required") {
        None => {}
        Some(Value::Array(required)) => {
            for r in required {
                match (r.as_str(), properties) {
                    (None, _) => problems.push(format!(
                        "{at}: inputSchema.required must list property names"
                    )),
                    (Some(r), Some(p)) if !p.contains_key(r) => problems.push(format!(
                        "{at}: inputSchema.required names {r:?}, which is not in its properties"
                    )),
                    _ => {}
                }
            }
        }
        Some(_) => problems.push(format!(
            "{at}: inputSchema.required must be a list of property names"
        )),
    }
    match crate::crd::url::placeholders(&tool.url) {
        Err(why) => problems.push(format!("tools.http[{i}].url ({}): {why}", tool.name)),
        Ok(names) => {
            for name in names {
                if properties.is_some_and(|p| !p.contains_key(name)) {
                    problems.push(format!(
                        "{at}: url placeholder {{{name}}} is not a property of inputSchema"
                    ));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(yaml: &str) -> AgentSpec {
        serde_yaml::from_str(yaml).unwrap()
    }

    #[test]
    fn phases_must_name_the_agents_tools_and_run_forward() {
        let s = spec("{model: {provider: scripted, name: x}, tools: {builtin: [read_messages, send_message]}, cycle: {phases: [{fromStep: 0, toStep: 1, activeTools: [read_messages, fly]}, {fromStep: 3, toStep: 2}]}}");
        let p = validate("a", &s);
        assert_eq!(p.len(), 2, "{p:?}");
        assert!(p[0].contains("\"fly\""));
        assert!(p[1].contains("ends (step 2) before it starts (step 3)"));
    }

    #[test]
    fn long_names_and_reserved_env_are_problems() {
        let s = spec("{model: {provider: scripted, name: x}, worker: {env: [{name: AGENTFLEET_REDIS_URL, value: x}, {name: OK, value: y}]}}");
        let p = validate(&"a".repeat(53), &s);
        assert_eq!(p.len(), 2, "{p:?}");
        assert!(p[0].contains("53 characters"));
        assert!(p[1].contains("AGENTFLEET_REDIS_URL"));
        assert!(validate("fine", &spec("{model: {provider: scripted, name: x}}")).is_empty());
    }

    #[test]
    fn anthropic_is_a_provider() {
        let p = validate("a", &spec("{model: {provider: anthropic, name: claude}}"));
        assert!(p.is_empty(), "{p:?}");
    }

    /// An agent with the given `tools` and `cycle` (YAML flow mappings).
    fn with_tools(tools: &str, cycle: &str) -> Vec<String> {
        validate(
            "a",
            &spec(&format!(
                "{{model: {{provider: scripted, name: x}}, tools: {tools}, cycle: {cycle}}}"
            )),
        )
    }

    const TRACKER: &str = "{name: tracker, url: \"http://mcp.ops/mcp\", tools: [create, close]}";

    #[test]
    fn a_valid_tool_set_passes() {
        let tools = format!(
            "{{http: [{{name: get_ticket, description: d, url: \"http://t/tickets/{{id}}?v=1\", method: GET, inputSchema: {{type: object, properties: {{id: {{type: string}}}}, required: [id]}}}}, {{name: ping, description: d, url: \"http://t/ping\"}}], mcp: [{TRACKER}, {{name: grafana, url: \"http://g/mcp\"}}]}}"
        );
        let cycle = "{phases: [{toStep: 0, activeTools: [read_messages, get_ticket, tracker__create, grafana__query, grafana__*, tracker__*]}]}";
        assert_eq!(with_tools(&tools, cycle), Vec::<String>::new());
    }

    #[test]
    fn a2a_agents_have_prefixes_of_their_own_and_their_skills_can_be_phased() {
        let p = with_tools(
            &format!("{{mcp: [{TRACKER}], a2a: [{{name: tracker, url: \"http://a\"}}, {{name: billing, url: \"http://b\"}}, {{name: billing, url: \"http://c\"}}]}}"),
            "{phases: [{toStep: 0, activeTools: [billing__refund]}]}",
        );
        assert_eq!(
            p,
            [
                "tools.a2a[0].name \"tracker\" is used by another MCP server or A2A agent",
                "tools.a2a[2].name \"billing\" is used by another MCP server or A2A agent",
            ]
        );
    }

    #[test]
    fn tool_names_are_each_one_tools() {
        let p = with_tools(
            &format!("{{http: [{{name: skip, description: d, url: \"http://t\"}}, {{name: tracker__create, description: d, url: \"http://t\"}}, {{name: ping, description: d, url: \"http://t\"}}, {{name: ping, description: d, url: \"http://t\"}}], interactive: [{{name: ping, description: d}}, {{name: send_message, description: d}}], mcp: [{TRACKER}, {TRACKER}, {{name: tracker__v2, url: \"http://x\"}}, {{name: gh, url: \"http://gh\", tools: [search], requireApproval: [merge]}}]}}"),
            "{}",
        );
        let want = [
            "tools.http[0].name \"skip\" is the name of a built-in tool",
            "tools.http[1].name \"tracker__create\" is inside the prefix tracker__ of MCP server \"tracker\"'s tools",
            "tools.http[3].name \"ping\" is used by another HTTP or interactive tool",
            "tools.interactive[0].name \"ping\" is used by another HTTP or interactive tool",
            "tools.interactive[1].name \"send_message\" is the name of a built-in tool",
            "tools.mcp[3].requireApproval names \"merge\", which its tools allowlist does not allow",
            "tools.mcp[0].name \"tracker\": the tools of MCP server \"tracker__v2\" would be inside its prefix tracker__",
            "tools.mcp[1].name \"tracker\" is used by another MCP server",
        ];
        for w in want {
            assert!(p.iter().any(|x| x == w), "missing {w:?} in {p:#?}");
        }
    }

    #[test]
    fn phases_may_name_http_tools_and_declared_servers_tools() {
        let tools = format!(
            "{{builtin: [send_message], http: [{{name: ping, description: d, url: \"http://t\"}}], mcp: [{TRACKER}]}}"
        );
        let p = with_tools(
            &tools,
            "{phases: [{activeTools: [ping, tracker__create, tracker__*, tracker__delete, jira__create, skip, pong]}]}",
        );
        assert_eq!(p.len(), 4, "{p:#?}");
        assert!(
            p[0].contains("\"tracker__delete\": MCP server \"tracker\" allows only create, close"),
            "{p:?}"
        );
        assert!(
            p[1].contains("\"jira__create\": not a tool of this agent"),
            "{p:?}"
        );
        assert!(
            p[2].contains("\"skip\": a built-in tool that tools.builtin does not enable"),
            "{p:?}"
        );
        assert!(p[3].contains("\"pong\": not a tool of this agent"), "{p:?}");
    }

    #[test]
    fn url_placeholders_name_properties_of_an_object_schema() {
        let http = |url: &str, schema: &str| {
            with_tools(
                &format!("{{http: [{{name: t, description: d, url: \"{url}\", inputSchema: {schema}}}]}}"),
                "{}",
            )
        };
        let props = "{type: object, properties: {id: {type: string}}}";
        assert!(http("http://t/{id}", props).is_empty());
        assert!(
            http("http://t/{anything}", "{type: object}").is_empty(),
            "no properties declared: any placeholder"
        );
        let p = http("http://t/{id}/{other}", props);
        assert_eq!(
            p,
            ["tools.http[0] (t): url placeholder {other} is not a property of inputSchema"]
        );
        for (url, want) in [
            ("http://t/{id", "a '{' without its '}'"),
            ("http://t/id}", "a '}' without its '{'"),
            ("http://t/{}", "placeholder {} is not a property name"),
            ("http://t/{a b}", "placeholder {a b} is not a property name"),
        ] {
            let p = http(url, props);
            assert!(p.len() == 1 && p[0].contains(want), "{url}: {p:?}");
        }
        for (schema, want) in [
            (
                "{type: array}",
                "inputSchema must be an object schema (type: object)",
            ),
            (
                "{properties: {id: {}}}",
                "inputSchema must be an object schema",
            ),
            (
                "{type: object, properties: [id]}",
                "inputSchema.properties must be an object",
            ),
            (
                "{type: object, properties: {id: {}}, required: [nope]}",
                "inputSchema.required names \"nope\", which is not in its properties",
            ),
            (
                "{type: object, required: id}",
                "inputSchema.required must be a list",
            ),
        ] {
            let p = http("http://t", schema);
            assert!(p.iter().any(|x| x.contains(want)), "{schema}: {p:?}");
        }
    }

    /// The problems of an agent `a` with this `consciousness` (a YAML flow mapping).
    fn with_consciousness(consciousness: &str) -> Vec<String> {
        validate(
            "a",
            &spec(&format!(
                "{{model: {{provider: scripted, name: x}}, consciousness: {consciousness}}}"
            )),
        )
    }

    #[test]
    fn a_restore_names_one_checkpoint_an_archive_or_the_data_plane_holds() {
        for ok in [
            "{restore: {cycle: 40}}",
            "{restore: {storageRef: \"s3://bucket/prod/ops/a/40\"}}",
            "{restore: {storageRef: \"gs://bucket/ops/a/40\"}}",
            "{restore: {storageRef: \"az://container/ops/a/40\"}}",
            "{restore: {storageRef: \"file:///var/lib/checkpoints/ops/a/40\"}}",
            "{restore: {storageRef: \"redis:agentfleet:{agent:ops/a}:checkpoints#cycle=40\"}}",
            "{restore: {storageRef: \"memory:ops/a#cycle=40\"}}",
            "{seedFrom: {agent: sre}, archive: {prefix: team-a/checkpoints}}",
            "{seedFrom: {agent: sre, cycle: 3}}",
        ] {
            assert_eq!(with_consciousness(ok), Vec::<String>::new(), "{ok}");
        }
        for (bad, says) in [
            (
                "{restore: {cycle: 4, storageRef: \"s3://b/x\"}}",
                "consciousness.restore: give exactly one of cycle and storageRef",
            ),
            (
                "{restore: {}}",
                "consciousness.restore: give exactly one of cycle and storageRef",
            ),
            (
                "{restore: {storageRef: \"https://example.com/x\"}}",
                "consciousness.restore.storageRef \"https://example.com/x\" is neither an archived checkpoint's URL",
            ),
            (
                "{restore: {storageRef: \"file:relative/40\"}}",
                "a directory must be an absolute path",
            ),
            (
                "{restore: {storageRef: \"redis:k#cycle=forty\"}}",
                "nor the data plane's checkpoint reference (redis:…#cycle=N",
            ),
            (
                "{seedFrom: {agent: Not_An_Agent}}",
                "consciousness.seedFrom.agent: \"Not_An_Agent\" is not a valid name",
            ),
            (
                "{seedFrom: {agent: a}}",
                "consciousness.seedFrom.agent \"a\" is this Agent",
            ),
            (
                "{archive: {prefix: team-a/../team-b}}",
                "consciousness.archive.prefix \"team-a/../team-b\" has a '..' segment",
            ),
            ("{archive: {prefix: ..}}", "has a '..' segment"),
        ] {
            let p = with_consciousness(bad);
            assert!(
                p.len() == 1 && p[0].contains(says),
                "{bad}: want {says:?}, got {p:?}"
            );
        }
    }

    #[test]
    fn a_spec_must_fit_the_configmap_the_worker_reads() {
        let mut s = spec("{model: {provider: scripted, name: x}}");
        s.instructions = "x".repeat(MAX_RENDERED_SPEC_BYTES);
        let p = validate("a", &s);
        assert_eq!(p.len(), 1, "{p:?}");
        assert!(
            p[0].contains("(spec.instructions alone is ")
                && p[0].contains("a ConfigMap, which holds at most"),
            "{p:?}"
        );
        s.instructions = "x".repeat(100_000);
        assert!(validate("a", &s).is_empty());
    }

    #[test]
    fn url_placeholders_never_choose_where_the_request_goes() {
        let props = "{type: object, properties: {region: {type: string}, port: {type: integer}, h: {type: string}}}";
        for url in [
            "http://{region}:19102/api",
            "http://127.0.0.1:{port}/api",
            "http://{h}.example/api",
        ] {
            let p = with_tools(
                &format!("{{http: [{{name: fetch, description: d, url: \"{url}\", inputSchema: {props}}}]}}"),
                "{}",
            );
            assert_eq!(p.len(), 1, "{url}: {p:?}");
            assert!(
                p[0].starts_with("tools.http[0].url (fetch): placeholder {")
                    && p[0].contains("is in the scheme, host or port"),
                "{url}: {p:?}"
            );
        }
    }
}
