//! The web console in a real browser: headless Chromium (Debian's `chromium` and
//! `chromium-driver`) against `agentfleet dev config/samples`, driven over WebDriver.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use agentfleet::testing::browser::Browser;
use agentfleet::testing::{MockModel, MockTurn};
use serde_json::{json, Value};

#[path = "support/dev.rs"]
mod support;
use support::{openai, Dev, ManifestDir};

const WAIT: Duration = Duration::from_secs(10);

/// Signs `token` in on the page open in `browser` (any page of the console).
async fn sign_in(browser: &Browser, token: &str) {
    browser.type_on("#token", token, WAIT).await.unwrap();
    browser.click_on("#signin-button", WAIT).await.unwrap();
}

/// A browser on `page` of the console of `dev` (`#/…`, or empty for the first page), signed
/// in with `token`.
async fn signed_in(dev: &Dev, page: &str, token: &str) -> Browser {
    let browser = Browser::start().await.unwrap();
    browser
        .goto(&format!("{}/console/{page}", dev.url))
        .await
        .unwrap();
    sign_in(&browser, token).await;
    browser
}

/// With `AGENTFLEET_SCREENSHOTS=DIR`, a PNG of the page as `DIR/NAME.png` (the docs' pictures).
async fn screenshot(browser: &Browser, name: &str) {
    if let Some(dir) = std::env::var_os("AGENTFLEET_SCREENSHOTS") {
        let png = browser.screenshot().await.unwrap();
        std::fs::write(std::path::Path::new(&dir).join(format!("{name}.png")), png).unwrap();
    }
}

/// Waits until `script` (returning a value) returns something `done` accepts; that value.
async fn until(browser: &Browser, script: &str, done: impl Fn(&Value) -> bool) -> Value {
    until_within(browser, WAIT, script, done).await
}

/// [`until`], waiting up to `within`.
async fn until_within(
    browser: &Browser,
    within: Duration,
    script: &str,
    done: impl Fn(&Value) -> bool,
) -> Value {
    let start = std::time::Instant::now();
    loop {
        let v = browser.exec(script).await.unwrap();
        if done(&v) {
            return v;
        }
        assert!(
            start.elapsed() < within,
            "still {v} after {within:?}: {script}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A deployer's model: asked to restart, it calls `restart` (which needs approval); asked to
/// deploy, it asks the space with `confirm_deployment`; asked to flood, it says as much
/// hostile text as a message may hold (64 KiB); asked to look, it thinks aloud (echoing what
/// it was told) and reads the space; told something is not for it, it skips; and it says what
/// came of each call.
fn deployer(req: &Value) -> MockTurn {
    let last = agentfleet::testing::last_turn(req);
    let content = &last.content;
    let say = |text: String| MockTurn::tools(&[("send_message", json!({ "text": text }))]);
    match (last.role.as_str(), last.called.as_str()) {
        ("tool", "send_message") => MockTurn::text("done"),
        ("tool", "restart") => say(format!("restart: {content}")),
        ("tool", "confirm_deployment") => say(format!("Deploying: {content}")),
        ("tool", "read_messages") => say("I read the space.".into()),
        _ if content.contains("not for you") => {
            MockTurn::tools(&[("skip", json!({"reason": "not for me"}))])
        }
        _ if content.contains("please look") => MockTurn::Reply {
            text: Some(format!("Thinking about what I was told: {content}")),
            tool_calls: vec![("read_messages".into(), json!({"limit": 5}).to_string())],
            usage: (120, 30),
        },
        _ if content.contains("please restart") => MockTurn::tools(&[("restart", json!({}))]),
        _ if content.contains("please drain") => MockTurn::tools(&[("drain", json!({}))]),
        _ if content.contains("please deploy") => {
            MockTurn::tools(&[("confirm_deployment", json!({"version": "1.2"}))])
        }
        _ if content.contains("please format") => say(MARKDOWN.into()),
        _ if content.contains("please flood") => say(format!(
            "<img src=x onerror=\"window.pwned=1\">\u{202e}{}",
            "<b>x</b>".repeat(8_000)
        )),
        _ => say("ok".into()),
    }
}

/// What the deployer says asked to format: Markdown as models write it, with hostile links.
const MARKDOWN: &str = "Rollout **done** for `api`:\n- step *one*\n- step two\n\n```\nkubectl get pods <b>\n```\nSee [the runbook](https://runbooks.example.com/api) or [this](javascript:window.pwned=1) <img src=x onerror=window.pwned=1>";

/// `agentfleet dev` with the deployer in space `desk`, and Husam's token.
async fn desk() -> (MockModel, ManifestDir, Dev, String) {
    agentfleet::install_crypto_provider();
    let model = MockModel::responding(deployer).await.unwrap();
    let spec = format!(
        "{}
  tools:
    http:
      - {{name: restart, description: Restarts the service., url: 'http://127.0.0.1:9/restart', method: POST, requireApproval: true}}
      - {{name: drain, description: Drains a node., url: 'http://127.0.0.1:9/drain', method: POST, requireApproval: true}}
    approvers: [{{tools: [drain], subjects: ['human:dana']}}]
    interactive:
      - name: confirm_deployment
        description: Ask a human to confirm a deployment.
        inputSchema: {{type: object, properties: {{version: {{type: string}}}}}}
        resultSchema:
          type: object
          properties:
            confirmed: {{type: boolean, description: Go ahead.}}
            replicas: {{type: integer, minimum: 1, maximum: 10}}
            note: {{type: string, maxLength: 40}}
          required: [confirmed, replicas]",
        openai(&model.base_url)
    );
    let dir = ManifestDir::new("console", "desk", &[("deployer", spec)]);
    let dev = Dev::start_in(dir.path(), &[]);
    let husam = dev.token("default/desk", "Husam");
    (model, dir, dev, husam)
}

/// Posts `text` in `desk` as `token`, then waits until a call of the deployer waits for an
/// answer: its id.
async fn asked(dev: &Dev, token: &str, text: &str) -> String {
    let http = reqwest::Client::new();
    let posted = http
        .post(format!("{}/v1/spaces/default/desk/messages", dev.url))
        .bearer_auth(token)
        .json(&json!({ "text": text }))
        .send()
        .await
        .unwrap();
    assert_eq!(posted.status(), 201);
    let start = std::time::Instant::now();
    loop {
        let calls = dev.get(&http, token, "/v1/calls").await;
        if let Some(id) = calls["calls"][0]["callId"].as_str() {
            return id.to_string();
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "no call: {calls}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_signs_in_and_sees_their_spaces_and_what_waits_for_them() {
    agentfleet::install_crypto_provider();
    let dev = Dev::start();
    let browser = Browser::start().await.unwrap();
    browser.goto(&dev.console).await.unwrap();

    // A wrong token is refused, and says so.
    let token = browser.wait_for("#token", WAIT).await.unwrap();
    screenshot(&browser, "sign-in").await;
    browser.type_into(&token, "not-a-token").await.unwrap();
    browser.click_on("#signin-button", WAIT).await.unwrap();
    assert_eq!(
        browser
            .text_of("#signin-error:not(:empty)", WAIT)
            .await
            .unwrap(),
        "That token is not known here."
    );

    // Husam's token: his name, his three spaces, nothing waiting.
    browser
        .type_into(&token, &dev.token("default/family", "Husam"))
        .await
        .unwrap();
    browser.click_on("#signin-button", WAIT).await.unwrap();
    browser
        .wait_for("#spaces li[data-space]", WAIT)
        .await
        .unwrap();
    let who = browser
        .text(&browser.wait_for("#who", WAIT).await.unwrap())
        .await
        .unwrap();
    assert_eq!(who, "Husam (human)");
    let spaces = browser
        .exec("return [...document.querySelectorAll('#spaces li')].map(li => li.dataset.space)")
        .await
        .unwrap();
    assert_eq!(
        spaces,
        serde_json::json!(["default/engineering", "default/family", "default/ops"])
    );
    let calls = browser
        .text(&browser.wait_for("#calls li", WAIT).await.unwrap())
        .await
        .unwrap();
    assert_eq!(calls, "Nothing waits for you.");
    // The token is in the tab's session storage only: not in the URL, not in a cookie.
    let kept = browser
        .exec("return [location.href, document.cookie, sessionStorage.length]")
        .await
        .unwrap();
    assert_eq!(kept[0], serde_json::json!(format!("{}/console/", dev.url)));
    assert_eq!(kept[1], "");
    assert_eq!(kept[2], 1);

    // The policy holds: an HTML sink throws, and nothing broke it on the way.
    let sink = browser
        .exec("try { document.body.innerHTML = '<b>x</b>'; return 'written'; } catch (e) { return e.name; }")
        .await
        .unwrap();
    assert_eq!(sink, "TypeError", "Trusted Types refuse HTML");
    let errors = browser.errors().await.unwrap();
    let unexpected: Vec<_> = errors
        .iter()
        .filter(|e| !e.contains("/v1/me") && !e.contains("TrustedHTML"))
        .collect();
    assert!(unexpected.is_empty(), "{errors:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_talks_in_a_space_and_hostile_text_stays_text() {
    agentfleet::install_crypto_provider();
    let dev = Dev::start();
    let husam = dev.token("default/family", "Husam");
    // Hostile text, posted before the page opens: markup, a script in an attribute, bidi
    // overrides, and a long run of text.
    let hostile = format!(
        "<img src=x onerror=\"window.pwned=1\"><script>window.pwned=2</script> \u{202e}gnp.exe {}",
        "x".repeat(50_000)
    );
    let posted = reqwest::Client::new()
        .post(format!("{}/v1/spaces/default/family/messages", dev.url))
        .bearer_auth(&husam)
        .json(&serde_json::json!({ "text": hostile }))
        .send()
        .await
        .unwrap();
    assert_eq!(posted.status(), 201);

    let browser = signed_in(&dev, "", &husam).await;
    let family = browser
        .wait_for("#spaces li[data-space='default/family'] a", WAIT)
        .await
        .unwrap();
    browser.click(&family).await.unwrap();

    // The hostile message is there, as text: no image, no script ran.
    browser
        .wait_for("#messages li.message", WAIT)
        .await
        .unwrap();
    let inert = browser
        .exec("return [document.querySelectorAll('#messages img, #messages script').length, window.pwned === undefined, [...document.querySelectorAll('#messages li .text')].some(t => t.textContent.startsWith('<img src=x'))]")
        .await
        .unwrap();
    assert_eq!(inert, serde_json::json!([0, true, true]));
    // Each message says when it was written (issue 43): today's by the time of day, the whole
    // date and time in `datetime` and on hover.
    let stamp = browser
        .exec("const t = document.querySelector('#messages li.message time.when'); return [t.textContent, t.dateTime, t.title, Math.abs(Date.parse(t.dateTime) - Date.now()) < 600000]")
        .await
        .unwrap();
    let stamp = stamp.as_array().unwrap();
    assert!(
        stamp[0].as_str().unwrap().contains(':') && stamp[0].as_str().unwrap().len() <= 12,
        "{stamp:?}"
    );
    assert!(stamp[1].as_str().unwrap().ends_with('Z'), "{stamp:?}");
    assert!(!stamp[2].as_str().unwrap().is_empty(), "{stamp:?}");
    assert_eq!(stamp[3], true, "{stamp:?}");

    // Sending: the assistant's answer arrives live, written as it streams (a draft that gives
    // way to the message), with what it is doing on the activity line meanwhile. (Both pass
    // in milliseconds: an observer of the page records them.)
    browser
        .exec("window.seen = {drafts: [], activity: []}; \
               new MutationObserver((records) => { for (const r of records) for (const n of r.addedNodes) { \
                 if (n.nodeType === 1 && n.classList.contains('streaming')) window.seen.drafts.push(n); \
                 if (n.nodeType === 3 && r.target.id === 'activity') window.seen.activity.push(n.data); \
               } }).observe(document.querySelector('#space'), {childList: true, subtree: true}); \
               return null")
        .await
        .unwrap();
    browser
        .type_on("#message", "hello from the browser", WAIT)
        .await
        .unwrap();
    browser.click_on("#send-button", WAIT).await.unwrap();
    until(&browser, SAID, |v| {
        v.as_array()
            .unwrap()
            .iter()
            .any(|t| t.as_str().unwrap().contains("hello from the browser"))
    })
    .await;
    let seen = browser
        .exec("return {drafts: window.seen.drafts.map(d => d.textContent), activity: window.seen.activity}")
        .await
        .unwrap();
    assert!(
        seen["drafts"]
            .as_array()
            .unwrap()
            .iter()
            .any(|d| d.as_str().unwrap().contains("hello from the browser")),
        "{seen}"
    );
    assert!(
        seen["activity"]
            .as_array()
            .unwrap()
            .contains(&json!("assistant is thinking…")),
        "{seen}"
    );
    let errors = browser.errors().await.unwrap();
    assert!(errors.is_empty(), "{errors:?}");
}

/// The texts of the deployer's messages in the space page open in `browser`.
const SAID: &str = "return [...document.querySelectorAll('#messages li.agent:not(.streaming) .text:last-child')].map(t => t.textContent)";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_to_a_call_leads_to_approving_it_and_the_cycle_goes_on() {
    let (_model, _dir, dev, husam) = desk().await;
    let call = asked(&dev, &husam, "please restart").await;

    // The link an alert would carry: the call is in the fragment, which no server sees.
    let browser = Browser::start().await.unwrap();
    let link = format!("{}/console/#/calls/{call}", dev.url);
    // The agent's page says what it asks a person, and leads to it (issue 43).
    browser
        .goto(&format!("{}/console/#/agents/default/deployer", dev.url))
        .await
        .unwrap();
    sign_in(&browser, &husam).await;
    browser
        .click_on("#agent-body a.asking", WAIT)
        .await
        .unwrap();
    browser
        .wait_for("#call-body button.approve", WAIT)
        .await
        .unwrap();
    let here = browser.exec("return location.hash").await.unwrap();
    assert_eq!(here, json!(format!("#/calls/{call}")));
    browser.goto(&link).await.unwrap();
    let approve = browser
        .wait_for("#call-body button.approve", WAIT)
        .await
        .unwrap();
    let shown = browser
        .exec("return [location.href, document.querySelector('#call-body').dataset.call, document.querySelector('#call-body h2').textContent]")
        .await
        .unwrap();
    assert_eq!(shown, json!([link, call, "deployer asks: restart"]));
    screenshot(&browser, "call-approval").await;
    browser
        .type_on("#reason", "after the backup", WAIT)
        .await
        .unwrap();
    browser.click(&approve).await.unwrap();
    assert_eq!(
        browser
            .text_of("#call-body .outcome:not(:empty)", WAIT)
            .await
            .unwrap(),
        "Approved. deployer goes on."
    );

    // The cycle goes on: the tool ran (its server is not there) and the agent says so.
    browser.click_on("#call-body p.meta a", WAIT).await.unwrap();
    let said = until(&browser, SAID, |v| {
        v.as_array()
            .unwrap()
            .iter()
            .any(|t| t.as_str().unwrap().starts_with("restart:"))
    })
    .await;
    assert!(said.to_string().contains("restart:"), "{said}");
    // And the link leads nowhere now, saying why.
    browser.goto(&link).await.unwrap();
    let gone = browser.wait_for("#call-body p.empty", WAIT).await.unwrap();
    assert!(browser
        .text(&gone)
        .await
        .unwrap()
        .contains("was answered, it ran out of time"));
    let errors = browser.errors().await.unwrap();
    assert!(errors.is_empty(), "{errors:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_for_someone_else_is_shown_but_not_offered() {
    let (_model, _dir, dev, husam) = desk().await;
    // drain's approver is Dana: Husam sees the call in his space, and no way to answer it.
    let call = asked(&dev, &husam, "please drain node 3").await;
    let browser = signed_in(&dev, &format!("#/calls/{call}"), &husam).await;
    let note = browser.wait_for("#call-body p.empty", WAIT).await.unwrap();
    assert_eq!(
        browser.text(&note).await.unwrap(),
        "Only human:dana may answer this call."
    );
    let buttons = browser
        .exec("return document.querySelectorAll('#call-body button').length")
        .await
        .unwrap();
    assert_eq!(buttons, json!(0));
    // Nor does it wait for him on the first page.
    browser
        .goto(&format!("{}/console/", dev.url))
        .await
        .unwrap();
    let empty = browser.wait_for("#calls li.empty", WAIT).await.unwrap();
    assert_eq!(
        browser.text(&empty).await.unwrap(),
        "Nothing waits for you."
    );
    let errors = browser.errors().await.unwrap();
    assert!(errors.is_empty(), "{errors:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_form_refuses_what_the_schema_refuses() {
    let (_model, _dir, dev, husam) = desk().await;
    let call = asked(&dev, &husam, "please deploy").await;
    let browser = signed_in(&dev, "", &husam).await;
    // Waiting for Husam on his first page, with a link to answer it.
    let answer = browser
        .wait_for(&format!("#calls li[data-call='{call}'] a.answer"), WAIT)
        .await
        .unwrap();
    browser.click(&answer).await.unwrap();

    // The form the schema makes: a checkbox, a whole number, a line of text.
    let replicas = browser.wait_for("#field-replicas", WAIT).await.unwrap();
    let kinds = browser
        .exec("return [...document.querySelectorAll('#call-body .field input')].map(i => i.name + ':' + i.type)")
        .await
        .unwrap();
    assert_eq!(
        kinds,
        json!(["confirmed:checkbox", "replicas:text", "note:text"])
    );
    browser.click_on("#field-confirmed", WAIT).await.unwrap();
    browser.type_into(&replicas, "50").await.unwrap();
    screenshot(&browser, "call-form").await;
    let send = browser
        .wait_for("#call-body button.send-answer", WAIT)
        .await
        .unwrap();
    browser.click(&send).await.unwrap();
    assert_eq!(
        browser
            .text_of("#call-body .problems li", WAIT)
            .await
            .unwrap(),
        "replicas must be at most 10"
    );
    screenshot(&browser, "call-form-refused").await;

    // Nothing was sent: the call still waits. And the gateway refuses it too, when a page
    // that does not check sends it anyway.
    let refused = browser
        .exec_async(&format!(
            "const r = await fetch('/v1/spaces/default/desk/tool-calls/{call}', {{method: 'POST', \
             headers: {{Authorization: 'Bearer ' + sessionStorage.getItem('agentfleet.token'), \
             'Content-Type': 'application/json'}}, body: JSON.stringify({{result: {{confirmed: true, replicas: 50}}}})}}); \
             return [r.status, (await r.json()).error.code];"
        ))
        .await
        .unwrap();
    assert_eq!(refused, json!([400, "invalid_request"]));

    // A value the schema takes is answered, and the agent goes on with it.
    browser.clear(&replicas).await.unwrap();
    browser.type_into(&replicas, "3").await.unwrap();
    browser.click(&send).await.unwrap();
    assert_eq!(
        browser
            .text_of("#call-body .outcome:not(:empty)", WAIT)
            .await
            .unwrap(),
        "Answered. deployer goes on."
    );
    assert_eq!(
        browser
            .exec("return document.querySelectorAll('#call-body .problems li').length")
            .await
            .unwrap(),
        0
    );
    browser
        .goto(&format!("{}/console/#/spaces/default/desk", dev.url))
        .await
        .unwrap();
    let said = until(&browser, SAID, |v| {
        v.as_array()
            .unwrap()
            .iter()
            .any(|t| t.as_str().unwrap().starts_with("Deploying:"))
    })
    .await;
    assert!(said.to_string().contains(r#"\"replicas\":3"#), "{said}");
    // (Only the refusal the page provoked on purpose.)
    let errors = browser.errors().await.unwrap();
    assert!(
        errors
            .iter()
            .all(|e| e.contains("tool-calls") && e.contains("400")),
        "{errors:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_full_of_an_agents_markup_stays_text() {
    let (_model, _dir, dev, husam) = desk().await;
    let browser = signed_in(&dev, "#/spaces/default/desk", &husam).await;
    // Live: the stream is open.
    browser.wait_for("#space[data-live]", WAIT).await.unwrap();
    browser
        .type_on("#message", "please flood", WAIT)
        .await
        .unwrap();
    browser.click_on("#send-button", WAIT).await.unwrap();
    let said = until_within(
        &browser,
        Duration::from_secs(30),
        "return [...document.querySelectorAll('#messages li.agent:not(.streaming) .text:last-child')].map(t => t.textContent.length)",
        |v| v.as_array().unwrap().iter().any(|n| n.as_u64().unwrap() > 60_000),
    )
    .await;
    assert!(!said.as_array().unwrap().is_empty());
    let inert = browser
        .exec("return [document.querySelectorAll('#messages img, #messages b').length, window.pwned === undefined]")
        .await
        .unwrap();
    assert_eq!(inert, json!([0, true]));
    let errors = browser.errors().await.unwrap();
    assert!(errors.is_empty(), "{errors:?}");
}

/// An agent's Markdown is shown formatted (issue 43) — from text nodes only: a link goes only
/// to http(s) and opens apart, markup stays text.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agents_markdown_is_formatted_and_stays_inert() {
    let (_model, _dir, dev, husam) = desk().await;
    let browser = signed_in(&dev, "#/spaces/default/desk", &husam).await;
    browser.wait_for("#space[data-live]", WAIT).await.unwrap();
    browser
        .type_on("#message", "please format **this**", WAIT)
        .await
        .unwrap();
    browser.click_on("#send-button", WAIT).await.unwrap();
    browser
        .wait_for("#messages li.agent:not(.streaming) .md", WAIT)
        .await
        .unwrap();
    let shown = browser
        .exec("const md = document.querySelector('#messages li.agent:not(.streaming) .md'); \
               const human = [...document.querySelectorAll('#messages li.message:not(.agent) .text')].pop(); \
               return [md.querySelector('strong').textContent, md.querySelector('p code').textContent, \
                       [...md.querySelectorAll('ul li')].map(l => l.textContent), md.querySelector('ul em').textContent, \
                       md.querySelector('pre code').textContent, \
                       [...md.querySelectorAll('a')].map(a => [a.textContent, a.href, a.rel, a.target]), \
                       md.textContent.includes('[this](javascript:window.pwned=1)'), \
                       document.querySelectorAll('#messages img, #messages b').length, window.pwned === undefined, \
                       human.textContent, human.querySelectorAll('strong').length]")
        .await
        .unwrap();
    assert_eq!(
        shown,
        json!([
            "done",
            "api",
            ["step one", "step two"],
            "one",
            "kubectl get pods <b>",
            [[
                "the runbook",
                "https://runbooks.example.com/api",
                "noopener noreferrer nofollow",
                "_blank"
            ]],
            true,
            0,
            true,
            "please format **this**",
            0
        ])
    );
    screenshot(&browser, "markdown").await;
    let errors = browser.errors().await.unwrap();
    assert!(errors.is_empty(), "{errors:?}");
}

/// The fleet at a glance (issue 43): every agent of the person's spaces in one table,
/// sortable by a column, filtered by state, each leading to its page.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fleet_overview_sorts_filters_and_leads_to_each_agent() {
    agentfleet::install_crypto_provider();
    let dev = Dev::start();
    let husam = dev.token("default/family", "Husam");
    let http = reqwest::Client::new();
    let posted = dev
        .post(&http, &husam, "family", &json!({"text": "hello assistant"}))
        .await;
    assert_eq!(posted.status(), 201);
    let start = std::time::Instant::now();
    while dev.count_from(&http, &husam, "family", "assistant").await == 0 {
        assert!(start.elapsed() < Duration::from_secs(20), "no answer");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let browser = signed_in(&dev, "#/agents", &husam).await;
    const ROWS: &str = "return [...document.querySelectorAll('table.fleet tr[data-agent]')].map(r => r.dataset.agent)";
    let rows = until(&browser, ROWS, |v| !v.as_array().unwrap().is_empty()).await;
    let mut agents: Vec<String> = rows
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_str().unwrap().to_string())
        .collect();
    assert!(
        agents.contains(&"default/assistant".to_string()),
        "{agents:?}"
    );
    let mut sorted = agents.clone();
    sorted.sort();
    assert_eq!(agents, sorted, "by agent, ascending");
    // The assistant answered: its last cycle and its model are there.
    let assistant = browser
        .exec("return [...document.querySelector('tr[data-agent=\"default/assistant\"]').cells].map(c => c.textContent)")
        .await
        .unwrap();
    assert_eq!(assistant[2], "scripted/assistant", "{assistant}");
    assert_ne!(assistant[4], "never", "{assistant}");
    assert_eq!(
        assistant[5], "committed",
        "how its last cycle ended: {assistant}"
    );
    assert_ne!(assistant[8], "—", "the process that ran it: {assistant}");
    screenshot(&browser, "fleet").await;

    // Sorted the other way by a click on the heading.
    browser
        .click_on("table.fleet button[data-column='Agent']", WAIT)
        .await
        .unwrap();
    let down = browser.exec(ROWS).await.unwrap();
    agents.reverse();
    assert_eq!(down, json!(agents));

    // Filtered by a state: only its agents stay.
    let state = browser
        .exec("const s = document.querySelector('#fleet-state'); s.value = s.options[1].value; s.dispatchEvent(new Event('change')); return s.value")
        .await
        .unwrap();
    let states = browser
        .exec("return [...document.querySelectorAll('table.fleet tr[data-agent] .state')].map(s => s.className.split(' ')[1])")
        .await
        .unwrap();
    assert!(
        !states.as_array().unwrap().is_empty()
            && states.as_array().unwrap().iter().all(|s| s == &state),
        "{state} {states}"
    );

    // An agent's row leads to its page.
    browser
        .exec("document.querySelector('#fleet-state').value = ''; document.querySelector('#fleet-state').dispatchEvent(new Event('change')); return null")
        .await
        .unwrap();
    browser
        .click_on("tr[data-agent='default/assistant'] a", WAIT)
        .await
        .unwrap();
    assert_eq!(
        browser.text_of("#agent-body h2", WAIT).await.unwrap(),
        "default/assistant"
    );
    let errors = browser.errors().await.unwrap();
    assert!(errors.is_empty(), "{errors:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agents_page_shows_what_it_does_and_spends() {
    agentfleet::install_crypto_provider();
    let dev = Dev::start();
    let husam = dev.token("default/family", "Husam");
    let http = reqwest::Client::new();
    // Three cycles, one after the other (the chart has a point for each).
    for (n, text) in [
        "hello assistant",
        "remember the boiler is serviced in May",
        "what do you remember?",
    ]
    .into_iter()
    .enumerate()
    {
        let posted = dev
            .post(&http, &husam, "family", &json!({ "text": text }))
            .await;
        assert_eq!(posted.status(), 201);
        let start = std::time::Instant::now();
        loop {
            if dev.count_from(&http, &husam, "family", "assistant").await > n {
                break;
            }
            assert!(start.elapsed() < WAIT, "no answer to {text}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let browser = signed_in(&dev, "", &husam).await;
    browser
        .wait_for("#spaces li[data-space='default/family']", WAIT)
        .await
        .unwrap();
    screenshot(&browser, "home").await;
    browser
        .goto(&format!("{}/console/#/spaces/default/family", dev.url))
        .await
        .unwrap();
    until(&browser, SAID, |v| v.as_array().unwrap().len() >= 3).await;
    screenshot(&browser, "space").await;
    // From the space list, the agent's name leads to its page.
    browser
        .goto(&format!("{}/console/#/", dev.url))
        .await
        .unwrap();
    browser
        .click(
            &browser
                .wait_for("#spaces li[data-space='default/family'] .meta a", WAIT)
                .await
                .unwrap(),
        )
        .await
        .unwrap();
    browser.wait_for("#agent-body .facts", WAIT).await.unwrap();
    let page = until(
        &browser,
        "return [location.hash, document.querySelector('#agent-body .state').dataset.state, \
         [...document.querySelectorAll('#agent-body .facts dt')].map(d => d.textContent + ': ' + d.nextSibling.textContent), \
         document.querySelectorAll('#agent-body table.checkpoints tr').length - 1, \
         document.querySelectorAll('#agent-body svg.chart rect.bar').length, \
         document.querySelector('#budget-today') && document.querySelector('#budget-today').max, \
         document.querySelector('#agent-body .state').textContent]",
        |v| v[3].as_u64().unwrap_or(0) >= 3,
    )
    .await;
    assert_eq!(page[0], "#/agents/default/assistant");
    assert!(
        ["sleeping", "thinking", "stopped"].contains(&page[1].as_str().unwrap()),
        "{page}"
    );
    // It answers: whatever it is doing, it is not "Not running" (dev's pool hosts it; an agent
    // no worker holds now is asleep until its next event).
    let said = page[6].as_str().unwrap();
    assert!(!said.contains("Not running"), "{page}");
    if page[1] == "stopped" {
        assert!(said.starts_with("Asleep"), "{page}");
    }
    let facts: Vec<&str> = page[2]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap())
        .collect();
    assert!(
        facts[0].starts_with("Model: scripted/assistant"),
        "{facts:?}"
    );
    assert_eq!(facts[1], "Spaces: family", "{facts:?}");
    assert!(facts[3].starts_with("Cycles: "), "{facts:?}");
    assert!(facts[4].ends_with(" of 2,000,000 tokens"), "{facts:?}");
    assert_eq!(page[3], page[4], "one bar per checkpoint: {page}");
    assert_eq!(page[5], 2_000_000);
    // Its tools, as its worker reported them.
    let tools = until(
        &browser,
        "return [...document.querySelectorAll('#agent-body table.tools td:first-child')].map(t => t.textContent)",
        |v| !v.as_array().unwrap().is_empty(),
    )
    .await;
    assert!(tools.to_string().contains("send_message"), "{tools}");
    // No tool's name breaks mid-word, even in a narrow window (issue 43).
    browser
        .exec("document.body.style.width = '420px'; return null")
        .await
        .unwrap();
    let lines = browser
        .exec("return [...document.querySelectorAll('#agent-body table.tools td:first-child')].map(td => { const r = document.createRange(); r.selectNodeContents(td); return new Set([...r.getClientRects()].map(q => Math.round(q.top))).size; })")
        .await
        .unwrap();
    assert!(
        lines.as_array().unwrap().iter().all(|n| n == 1),
        "each name on one line: {lines}"
    );
    browser
        .exec("document.body.style.width = ''; return null")
        .await
        .unwrap();
    screenshot(&browser, "agent").await;

    // An agent of nobody's space here: nothing, not even whether it exists.
    browser
        .goto(&format!("{}/console/#/agents/default/nobody", dev.url))
        .await
        .unwrap();
    assert_eq!(
        browser
            .text_of("#page-error:not(:empty)", WAIT)
            .await
            .unwrap(),
        "no agent \"default/nobody\" in your spaces"
    );
    let errors = browser.errors().await.unwrap();
    assert!(
        errors
            .iter()
            .all(|e| e.contains("/v1/agents/default/nobody")),
        "{errors:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn older_messages_page_in_and_a_message_can_address_one_agent() {
    agentfleet::install_crypto_provider();
    let dev = Dev::start();
    let husam = dev.token("default/engineering", "Husam");
    let http = reqwest::Client::new();
    // 70 messages nobody answers (the engineering agents answer only when addressed), at the
    // pace the gateway's rate limit allows.
    for n in 0..70 {
        let body = json!({ "text": format!("note {n}") });
        let mut posted = dev.post(&http, &husam, "engineering", &body).await;
        while posted.status() == 429 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            posted = dev.post(&http, &husam, "engineering", &body).await;
        }
        assert_eq!(posted.status(), 201);
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let browser = signed_in(&dev, "#/spaces/default/engineering", &husam).await;
    const TEXTS: &str = "return [...document.querySelectorAll('#messages li.message .text:last-child')].map(t => t.textContent)";
    let first = until(&browser, TEXTS, |v| v.as_array().unwrap().len() == 50).await;
    assert_eq!(first[0], "note 20");
    assert_eq!(first[49], "note 69");
    // Scrolled to the top, the 20 before come in above, in order.
    browser
        .exec("document.querySelector('#messages').scrollTop = 0; return null")
        .await
        .unwrap();
    let all = until(&browser, TEXTS, |v| v.as_array().unwrap().len() == 70).await;
    let expected: Vec<String> = (0..70).map(|n| format!("note {n}")).collect();
    assert_eq!(all, json!(expected));

    // To one agent: the message names it, and that agent answers.
    let choices = browser
        .exec("return [...document.querySelectorAll('#mention option')].map(o => o.value)")
        .await
        .unwrap();
    assert_eq!(choices, json!(["", "oncall", "reviewer"]));
    browser
        .exec("document.querySelector('#mention').value = 'oncall'; return null")
        .await
        .unwrap();
    browser
        .type_on("#message", "is the api up?", WAIT)
        .await
        .unwrap();
    browser.click_on("#send-button", WAIT).await.unwrap();
    assert_eq!(
        browser
            .text_of("#messages li.message .mention", WAIT)
            .await
            .unwrap(),
        "→ oncall"
    );
    let said = until(&browser, SAID, |v| !v.as_array().unwrap().is_empty()).await;
    assert!(
        said[0].as_str().unwrap().contains("is the api up?"),
        "{said}"
    );
    let senders = browser
        .exec("return [...document.querySelectorAll('#messages li.agent .sender')].map(s => s.textContent)")
        .await
        .unwrap();
    assert_eq!(senders, json!(["oncall"]));
    let errors = browser.errors().await.unwrap();
    assert!(errors.is_empty(), "{errors:?}");
}

/// A TCP relay to `target` on a free port, whose connections the test can cut: what a
/// dropped connection between a browser and the gateway looks like.
struct Relay {
    url: String,
    cut: tokio::sync::watch::Sender<u64>,
}

impl Relay {
    async fn start(target: &str) -> Relay {
        let target = target.trim_start_matches("http://").to_string();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let (cut, cuts) = tokio::sync::watch::channel(0u64);
        tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                let target = target.clone();
                let mut cuts = cuts.clone();
                cuts.mark_unchanged();
                tokio::spawn(async move {
                    let Ok(mut outbound) = tokio::net::TcpStream::connect(&target).await else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                        _ = cuts.changed() => {}
                    }
                });
            }
        });
        Relay { url, cut }
    }

    /// Cuts every connection open now.
    fn cut(&self) {
        self.cut.send_modify(|n| *n += 1);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_stream_resumes_where_it_left_off() {
    agentfleet::install_crypto_provider();
    let dev = Dev::start();
    let husam = dev.token("default/engineering", "Husam");
    let http = reqwest::Client::new();
    let relay = Relay::start(&dev.url).await;
    let browser = Browser::start().await.unwrap();
    browser
        .goto(&format!(
            "{}/console/#/spaces/default/engineering",
            relay.url
        ))
        .await
        .unwrap();
    sign_in(&browser, &husam).await;
    // Live: the stream is open.
    browser.wait_for("#space[data-live]", WAIT).await.unwrap();
    let post = |text: &'static str| {
        let (http, husam, dev) = (&http, &husam, &dev);
        async move {
            let posted = dev
                .post(http, husam, "engineering", &json!({ "text": text }))
                .await;
            assert_eq!(posted.status(), 201);
        }
    };
    const TEXTS: &str = "return [...document.querySelectorAll('#messages li.message .text:last-child')].map(t => t.textContent)";
    post("before").await;
    until(&browser, TEXTS, |v| v == &json!(["before"])).await;

    // The connection drops, and messages are said before the page connects again (it waits
    // a second): they come once it is back, once each, in order.
    relay.cut();
    tokio::time::sleep(Duration::from_millis(200)).await;
    post("while away 1").await;
    post("while away 2").await;
    until(&browser, TEXTS, |v| v.as_array().unwrap().len() >= 3).await;
    post("after").await;
    let all = until(&browser, TEXTS, |v| v.as_array().unwrap().len() >= 4).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        browser.exec(TEXTS).await.unwrap(),
        json!(["before", "while away 1", "while away 2", "after"]),
        "{all}"
    );
}

/// Posts `text` in `desk` as `token`, then waits until the deployer has answered `n` messages
/// in all, and committed the cycle that answered: its number of committed cycles then.
async fn answered(dev: &Dev, token: &str, text: &str, n: usize) -> u64 {
    let http = reqwest::Client::new();
    let posted = dev
        .post(&http, token, "desk", &json!({ "text": text }))
        .await;
    assert_eq!(posted.status(), 201);
    let start = std::time::Instant::now();
    while dev.count_from(&http, token, "desk", "deployer").await < n {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "no answer to {text}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The answer is posted during the cycle; it is over once committed (and recorded).
    loop {
        let agent = dev.get(&http, token, "/v1/agents/default/deployer").await;
        let cycles = agent["cycles"].as_u64().unwrap_or(0);
        if cycles >= n as u64 && agent["state"] != "thinking" {
            return cycles;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "not committed: {agent}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The deployer's cycle records as `token` reads them (`query` after `?`): the page, once it
/// holds `at_least` (or after a while).
async fn cycles(dev: &Dev, token: &str, query: &str, at_least: usize) -> Value {
    let http = reqwest::Client::new();
    let path = format!("/v1/agents/default/deployer/cycles?{query}");
    let start = std::time::Instant::now();
    loop {
        let page = dev.get(&http, token, &path).await;
        // Each record is written by the step that ends its cycle: soon after the commit.
        if page["cycles"]
            .as_array()
            .is_some_and(|c| c.len() >= at_least)
            || start.elapsed() > WAIT
        {
            return page;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// What an agent's cycles show (issue 43): the list of its records, and one cycle's steps —
/// the model's own text, each call with its arguments and result, how it ended — where
/// hostile text the model and a tool echo stays text.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agents_cycles_show_its_steps_calls_and_results_as_text() {
    let (_model, _dir, dev, husam) = desk().await;
    // A cycle that answers, one that skips (rolled back: only recorded), then the one to see.
    answered(&dev, &husam, "hello", 1).await;
    let http = reqwest::Client::new();
    let posted = dev
        .post(
            &http,
            &husam,
            "desk",
            &json!({"text": "this is not for you"}),
        )
        .await;
    assert_eq!(posted.status(), 201);
    cycles(&dev, &husam, "limit=10", 2).await;
    answered(
        &dev,
        &husam,
        "please look <img src=x onerror=window.pwned=1>",
        2,
    )
    .await;
    let page = cycles(&dev, &husam, "limit=10", 3).await;
    let outcomes: Vec<&Value> = page["cycles"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| &c["outcome"])
        .collect();
    assert_eq!(
        outcomes,
        [&json!("committed"), &json!("skipped"), &json!("committed")],
        "{page}"
    );
    let seq = page["cycles"][0]["seq"].as_u64().unwrap();

    // From the agent's page to its cycles: one row per record, newest first.
    let browser = signed_in(&dev, "#/agents/default/deployer", &husam).await;
    browser
        .click_on("#agent-body a.cycles-link", WAIT)
        .await
        .unwrap();
    let row = until(
        &browser,
        "const r = document.querySelector('table.cycles-list tr[data-seq]'); \
         return r ? [r.dataset.seq, ...[...r.cells].map(c => c.textContent)] : location.hash + ' ' + document.querySelector('main').textContent",
        |v| v.is_array(),
    )
    .await;
    assert_eq!(row[0], seq.to_string(), "newest first: {row}");
    let listed = browser
        .exec("return [...document.querySelectorAll('table.cycles-list tr[data-seq] span.outcome')].map(o => o.dataset.outcome)")
        .await
        .unwrap();
    assert_eq!(listed, json!(["committed", "skipped", "committed"]));
    assert_eq!(row[4], "committed", "{row}");
    let head = &page["cycles"][0];
    assert_eq!(row[5], head["steps"].to_string(), "{row}");
    assert_eq!(row[6], "2", "read_messages and send_message: {row}");
    assert_eq!(
        browser.exec("return location.hash").await.unwrap(),
        "#/agents/default/deployer/cycles"
    );
    screenshot(&browser, "cycles").await;

    // The cycle: what it woke for, each step, the model's text and each call, as text.
    browser
        .click_on(
            &format!("table.cycles-list tr[data-seq='{seq}'] a.cycle"),
            WAIT,
        )
        .await
        .unwrap();
    browser
        .wait_for(&format!("#cycles-body[data-seq='{seq}'] ol.steps"), WAIT)
        .await
        .unwrap();
    let shown = browser
        .exec(
            "const b = document.querySelector('#cycles-body'); \
             const call = (t) => b.querySelector('li.call[data-tool=\"' + t + '\"]'); \
             return {hash: location.hash, outcome: b.querySelector('h2 .outcome').dataset.outcome, \
               steps: b.querySelectorAll('li.step').length, \
               tools: [...b.querySelectorAll('li.call')].map(c => c.dataset.tool), \
               oks: [...b.querySelectorAll('li.call')].map(c => c.dataset.ok), \
               event: b.querySelector('li.event pre').textContent, \
               private: [...b.querySelectorAll('pre.private')].map(p => p.textContent), \
               arguments: call('read_messages').querySelector('pre.arguments').textContent, \
               result: call('read_messages').querySelector('pre.result').textContent, \
               said: call('send_message').querySelector('pre.arguments').textContent, \
               heads: [...b.querySelectorAll('.step-head')].map(h => h.textContent), \
               facts: [...b.querySelectorAll('.facts dt')].map(d => d.textContent + ': ' + d.nextSibling.textContent), \
               inert: [document.querySelectorAll('img').length, window.pwned === undefined]}",
        )
        .await
        .unwrap();
    let hostile = "<img src=x onerror=window.pwned=1>";
    assert_eq!(
        shown["hash"],
        format!("#/agents/default/deployer/cycles/{seq}")
    );
    assert_eq!(shown["outcome"], "committed", "{shown}");
    assert_eq!(shown["steps"], head["steps"], "{shown}");
    assert_eq!(
        shown["tools"],
        json!(["read_messages", "send_message"]),
        "{shown}"
    );
    assert_eq!(shown["oks"], json!(["ok", "ok"]), "{shown}");
    assert!(
        shown["heads"][0].as_str().unwrap().contains(" model mock "),
        "each step says which model answered: {shown}"
    );
    assert!(
        shown["event"].as_str().unwrap().contains(hostile),
        "{shown}"
    );
    // The model's own text (which reaches no space) echoes it, and so does the tool's result.
    assert!(
        shown["private"][0]
            .as_str()
            .unwrap()
            .starts_with("Thinking about what I was told: ")
            && shown["private"][0].as_str().unwrap().contains(hostile),
        "{shown}"
    );
    assert_eq!(shown["private"].as_array().unwrap().last().unwrap(), "done");
    assert!(
        shown["arguments"]
            .as_str()
            .unwrap()
            .contains("\"limit\": 5"),
        "{shown}"
    );
    assert!(
        shown["result"].as_str().unwrap().contains(hostile),
        "{shown}"
    );
    assert!(
        shown["said"]
            .as_str()
            .unwrap()
            .contains("I read the space."),
        "{shown}"
    );
    assert!(
        shown["heads"][0]
            .as_str()
            .unwrap()
            .contains("finish: tool_calls"),
        "{shown}"
    );
    let facts = shown["facts"].to_string();
    assert!(
        facts.contains("Answered: the members of its spaces"),
        "{facts}"
    );
    assert!(facts.contains("Posted: desk"), "{facts}");
    assert_eq!(shown["inert"], json!([0, true]), "no element from the text");
    screenshot(&browser, "cycle").await;
    let errors = browser.errors().await.unwrap();
    assert!(errors.is_empty(), "{errors:?}");

    // Whom RBAC does not let read the agent's consciousness is told so, plainly (in dev, a
    // service).
    let service = signed_in(&dev, "#/agents/default/deployer/cycles", &dev.service).await;
    assert_eq!(
        service
            .text_of("#cycles-body p.forbidden", WAIT)
            .await
            .unwrap(),
        "You may not read this agent’s cycles (RBAC: get agents/consciousness)."
    );
}

/// "Why did it say this?" (issue 43): an agent's message leads to the cycle that posted it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agents_message_leads_to_the_cycle_that_posted_it() {
    let (_model, _dir, dev, husam) = desk().await;
    answered(&dev, &husam, "hello", 1).await;
    answered(&dev, &husam, "hello again", 2).await;
    let browser = signed_in(&dev, "#/spaces/default/desk", &husam).await;
    until(&browser, SAID, |v| v.as_array().unwrap().len() == 2).await;
    // A person's message has no such link; each of the agent's has.
    let links = browser
        .exec("return [document.querySelectorAll('#messages li.message:not(.agent) a.why').length, \
               [...document.querySelectorAll('#messages li.agent')].map(li => [li.dataset.id, li.querySelector('a.why').getAttribute('href')])]")
        .await
        .unwrap();
    assert_eq!(links[0], 0, "{links}");
    let agent = links[1].as_array().unwrap();
    assert_eq!(agent.len(), 2, "{links}");
    for (n, m) in agent.iter().enumerate() {
        let id = m[0].as_str().unwrap();
        assert_eq!(m[1], format!("#/agents/default/deployer/why/{id}"));
        // The cycle the API says posted it.
        let posted = cycles(&dev, &husam, &format!("message={id}&limit=1"), 1).await;
        let seq = posted["cycles"][0]["seq"]
            .as_u64()
            .unwrap_or_else(|| panic!("{posted}"));
        assert!(
            posted["cycles"][0]["posted"]
                .as_array()
                .unwrap()
                .iter()
                .any(|p| p["id"] == id),
            "{posted}"
        );
        browser
            .goto(&format!("{}/console/#/spaces/default/desk", dev.url))
            .await
            .unwrap();
        browser
            .click_on(&format!("#messages li[data-id='{id}'] a.why"), WAIT)
            .await
            .unwrap();
        browser
            .wait_for(&format!("#cycles-body[data-seq='{seq}']"), WAIT)
            .await
            .unwrap();
        let shown = browser
            .exec(
                "const b = document.querySelector('#cycles-body'); return [location.hash, \
                   b.querySelector('.posted-this').textContent, \
                   [...b.querySelectorAll('a.posted')].map(a => a.dataset.message), \
                   b.querySelector('li.event pre').textContent]",
            )
            .await
            .unwrap();
        assert_eq!(shown[0], format!("#/agents/default/deployer/why/{id}"));
        assert_eq!(shown[1], format!("This cycle posted message {id}."));
        assert_eq!(shown[2], json!([id]), "{shown}");
        assert_eq!(shown[3], ["hello", "hello again"][n], "{shown}");
    }
    // A message no kept record posted: it says so.
    browser
        .goto(&format!(
            "{}/console/#/agents/default/deployer/why/1-0",
            dev.url
        ))
        .await
        .unwrap();
    let gone = browser.text_of("#cycles-body p.gone", WAIT).await.unwrap();
    assert!(
        gone.starts_with("No record that default/deployer keeps says why it posted 1-0"),
        "{gone}"
    );
    let errors = browser.errors().await.unwrap();
    assert!(errors.is_empty(), "{errors:?}");
}

/// Rewind and fork (issue 43): an agent's page rewinds it to a retained checkpoint once
/// confirmed, and shows the manifest of a fork seeded from one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_rewinds_to_a_checkpoint_and_forks_from_one() {
    let (_model, _dir, dev, husam) = desk().await;
    for (n, text) in ["hello", "hello again", "and again"]
        .into_iter()
        .enumerate()
    {
        answered(&dev, &husam, text, n + 1).await;
    }
    let http = reqwest::Client::new();
    let consciousness = "/v1/agents/default/deployer/consciousness";
    let before = dev.get(&http, &husam, consciousness).await;
    assert_eq!(before["cycle"], 3, "{before}");
    let browser = signed_in(&dev, "#/agents/default/deployer", &husam).await;
    until(
        &browser,
        "return document.querySelectorAll('#agent-body table.checkpoints tr[data-cycle]').length",
        |v| v.as_u64().unwrap_or(0) >= 3,
    )
    .await;

    // Fork: the manifest of a new Agent seeded from the checkpoint, under a name to choose.
    browser
        .click_on("#agent-body tr[data-cycle='2'] button.fork", WAIT)
        .await
        .unwrap();
    browser
        .wait_for("#fork-dialog[open] #fork-yaml", WAIT)
        .await
        .unwrap();
    const YAML: &str = "return document.querySelector('#fork-yaml').value";
    let yaml = browser.exec(YAML).await.unwrap();
    let yaml = yaml.as_str().unwrap();
    assert!(
        yaml.starts_with("apiVersion: agentfleet.dev/v1alpha1\nkind: Agent\nmetadata:\n  name: deployer-fork\n  namespace: default\nspec:\n"),
        "{yaml}"
    );
    assert!(
        yaml.ends_with("  consciousness:\n    seedFrom:\n      agent: deployer\n      cycle: 2\n"),
        "{yaml}"
    );
    assert!(yaml.contains("  spaces: [desk]\n"), "{yaml}");
    let name = browser.wait_for("#fork-name", WAIT).await.unwrap();
    browser.clear(&name).await.unwrap();
    browser.type_into(&name, "deployer-b").await.unwrap();
    let renamed = browser.exec(YAML).await.unwrap();
    assert!(
        renamed.as_str().unwrap().contains("  name: deployer-b\n"),
        "{renamed}"
    );
    let said = browser
        .exec("return [document.querySelector('#fork-name-error').textContent, document.querySelector('#fork-dialog p.apply').textContent]")
        .await
        .unwrap();
    assert_eq!(said[0], "", "{said}");
    assert!(
        said[1]
            .as_str()
            .unwrap()
            .starts_with("Apply it with kubectl apply -f"),
        "{said}"
    );
    browser.type_into(&name, "_B").await.unwrap();
    assert!(!browser
        .text_of("#fork-name-error", WAIT)
        .await
        .unwrap()
        .is_empty());
    browser.click_on("#fork-close", WAIT).await.unwrap();

    // Rewind: nothing happens until confirmed.
    browser
        .click_on("#agent-body tr[data-cycle='1'] button.rewind", WAIT)
        .await
        .unwrap();
    assert_eq!(
        browser
            .text_of("#rewind-dialog[open] h3", WAIT)
            .await
            .unwrap(),
        "Rewind default/deployer to cycle 1?"
    );
    browser.click_on("#rewind-cancel", WAIT).await.unwrap();
    let open = browser
        .exec("return document.querySelector('#rewind-dialog').open")
        .await
        .unwrap();
    assert_eq!(open, false);
    assert_eq!(dev.get(&http, &husam, consciousness).await["cycle"], 3);
    browser
        .click_on("#agent-body tr[data-cycle='1'] button.rewind", WAIT)
        .await
        .unwrap();
    browser.click_on("#rewind-confirm", WAIT).await.unwrap();
    const OUTCOME: &str = "const o = document.querySelector('#rewind-dialog .outcome'); return o.textContent === 'Rewinding…' ? '' : o.textContent";
    let start = std::time::Instant::now();
    let outcome = loop {
        let outcome = until(&browser, OUTCOME, |v| v != "").await;
        // (Refused while it thinks: then again, as a person would.)
        if !outcome.as_str().unwrap().starts_with("Not now") || start.elapsed() > WAIT {
            break outcome;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        browser.click_on("#rewind-confirm", WAIT).await.unwrap();
    };
    assert!(
        outcome
            .as_str()
            .unwrap()
            .starts_with("Rewound: default/deployer is as it was after cycle 1 ("),
        "{outcome}"
    );
    let after = dev.get(&http, &husam, consciousness).await;
    assert_eq!(after["cycle"], 1, "{after}");
    browser.click_on("#rewind-close", WAIT).await.unwrap();
    let errors = browser.errors().await.unwrap();
    assert!(errors.is_empty(), "{errors:?}");
}

/// Rehearses `candidate` in place on the deployer's last cycles, as `token` (dev's gateway
/// runs it): the report.
async fn rehearse(dev: &Dev, token: &str, name: &str, candidate: Value) -> Value {
    let http = reqwest::Client::new();
    let answer = http
        .post(format!("{}/v1/agents/default/deployer/rehearsals", dev.url))
        .bearer_auth(token)
        .json(&json!({"name": name, "candidate": candidate, "cycles": 10}))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    answer.json().await.unwrap()
}

/// A rehearsal beside the cycles it replayed (issue 45): dev rehearses candidates in place on
/// the deployer's recorded cycles; the console lists them, shows each cycle beside what the
/// candidate did in its place, and leads to the cycle it replayed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rehearsal_is_shown_beside_the_cycles_it_replayed() {
    let (model, _dir, dev, husam) = desk().await;
    answered(&dev, &husam, "hello", 1).await;
    let http = reqwest::Client::new();
    let posted = dev
        .post(
            &http,
            &husam,
            "desk",
            &json!({"text": "this is not for you"}),
        )
        .await;
    assert_eq!(posted.status(), 201);
    cycles(&dev, &husam, "limit=10", 2).await;
    answered(&dev, &husam, "hello again", 2).await;
    let page = cycles(&dev, &husam, "limit=10", 3).await;
    let seqs: Vec<u64> = page["cycles"]
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .map(|c| c["seq"].as_u64().unwrap())
        .collect();

    // New instructions on the same model decide as the agent did; a model that stays quiet
    // does not.
    let same = rehearse(
        &dev,
        &husam,
        "same",
        json!({"instructions": "You deploy, briefly."}),
    )
    .await;
    assert_eq!(same["report"]["summary"]["passed"], true, "{same}");
    let quiet_model =
        MockModel::responding(|_| MockTurn::tools(&[("skip", json!({"reason": "quiet today"}))]))
            .await
            .unwrap();
    let quiet = rehearse(
        &dev,
        &husam,
        "quiet",
        json!({"model": {"provider": "openai", "name": "mock", "baseUrl": quiet_model.base_url}}),
    )
    .await;
    let summary = &quiet["report"]["summary"];
    assert_eq!(summary["passed"], false, "{quiet}");
    assert_eq!(summary["compared"], 3);
    assert!(
        summary["verdict"]
            .as_str()
            .unwrap()
            .starts_with("the candidate replied or stayed quiet as recorded in 1 of 3 cycles"),
        "{summary}"
    );
    assert!(model.request_count() > 0);

    // From the cycles to the rehearsals, newest first.
    let browser = signed_in(&dev, "#/agents/default/deployer/cycles", &husam).await;
    browser
        .click_on("#cycles-body a.rehearsals-link", WAIT)
        .await
        .unwrap();
    let listed = until(
        &browser,
        "return [...document.querySelectorAll('table.rehearsals-list tr[data-name]')].map(r => [r.dataset.name, r.querySelector('[data-passed]').dataset.passed])",
        |v| v.as_array().is_some_and(|a| a.len() == 2),
    )
    .await;
    assert_eq!(listed, json!([["quiet", "false"], ["same", "true"]]));
    screenshot(&browser, "rehearsals").await;

    // One of them: each recorded cycle beside the candidate's, oldest first.
    browser
        .click_on(
            "table.rehearsals-list tr[data-name='quiet'] a.rehearsal",
            WAIT,
        )
        .await
        .unwrap();
    let rows = until(
        &browser,
        "return [...document.querySelectorAll('table.rehearsal-cycles tr[data-seq]')].map(r => [Number(r.dataset.seq), [...r.querySelectorAll('[data-outcome]')].map(o => o.dataset.outcome), r.querySelector('[data-agrees]').dataset.agrees])",
        |v| v.as_array().is_some_and(|a| a.len() == 3),
    )
    .await;
    assert_eq!(
        rows,
        json!([
            [seqs[0], ["replied", "skipped"], "false"],
            [seqs[1], ["skipped", "skipped"], "true"],
            [seqs[2], ["replied", "skipped"], "false"]
        ])
    );
    let verdict = browser
        .exec("return document.getElementById('rehearsal-verdict').textContent")
        .await
        .unwrap();
    assert_eq!(verdict, summary["verdict"]);
    screenshot(&browser, "rehearsal").await;

    // Each row leads to the cycle it replayed.
    browser
        .click_on(
            &format!("table.rehearsal-cycles tr[data-seq='{}'] a.cycle", seqs[2]),
            WAIT,
        )
        .await
        .unwrap();
    until(&browser, "return location.hash", |v| {
        v == &json!(format!("#/agents/default/deployer/cycles/{}", seqs[2]))
    })
    .await;
}
