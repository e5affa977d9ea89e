//! The web console in a real browser: headless Chromium (Debian's `chromium` and
//! `chromium-driver`) against `agentfleet dev config/samples`, driven over WebDriver.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use agentfleet::testing::browser::Browser;

#[path = "support/dev.rs"]
mod support;
use support::Dev;

const WAIT: Duration = Duration::from_secs(10);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_signs_in_and_sees_their_spaces_and_what_waits_for_them() {
    agentfleet::install_crypto_provider();
    let dev = Dev::start();
    let browser = Browser::start().await.unwrap();
    browser
        .goto(&format!("{}/console/", dev.url))
        .await
        .unwrap();

    // A wrong token is refused, and says so.
    let token = browser.wait_for("#token", WAIT).await.unwrap();
    browser.type_into(&token, "not-a-token").await.unwrap();
    browser
        .click(&browser.wait_for("#signin-button", WAIT).await.unwrap())
        .await
        .unwrap();
    let error = browser
        .wait_for("#signin-error:not(:empty)", WAIT)
        .await
        .unwrap();
    assert_eq!(
        browser.text(&error).await.unwrap(),
        "That token is not known here."
    );

    // Husam's token: his name, his three spaces, nothing waiting.
    browser
        .type_into(&token, &dev.token("default/family", "Husam"))
        .await
        .unwrap();
    browser
        .click(&browser.wait_for("#signin-button", WAIT).await.unwrap())
        .await
        .unwrap();
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

    let browser = Browser::start().await.unwrap();
    browser
        .goto(&format!("{}/console/", dev.url))
        .await
        .unwrap();
    browser
        .type_into(&browser.wait_for("#token", WAIT).await.unwrap(), &husam)
        .await
        .unwrap();
    browser
        .click(&browser.wait_for("#signin-button", WAIT).await.unwrap())
        .await
        .unwrap();
    let family = browser
        .wait_for("#spaces li[data-space='default/family']", WAIT)
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

    // Sending: the assistant's answer arrives live.
    browser
        .type_into(
            &browser.wait_for("#message", WAIT).await.unwrap(),
            "hello from the browser",
        )
        .await
        .unwrap();
    browser
        .click(&browser.wait_for("#send-button", WAIT).await.unwrap())
        .await
        .unwrap();
    let start = std::time::Instant::now();
    loop {
        let said = browser
            .exec("return [...document.querySelectorAll('#messages li.agent:not(.streaming) .text:last-child')].map(t => t.textContent)")
            .await
            .unwrap();
        if said
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t.as_str().unwrap().contains("hello from the browser"))
        {
            break;
        }
        assert!(start.elapsed() < WAIT, "no answer: {said}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let errors = browser.errors().await.unwrap();
    assert!(errors.is_empty(), "{errors:?}");
}
