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
