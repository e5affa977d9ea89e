//! The web console (issue 31), served by the gateway itself at `/console/`: a page, its
//! scripts (ES modules) and a style sheet embedded in the binary, with no library and no third-party request. It
//! calls the gateway's own API with the token a person pastes (kept in the tab only).
//!
//! Every answer carries a strict Content-Security-Policy: only this origin's script, style and
//! API; no frames, no form posts, no base URL; and Trusted Types with no policy, so any HTML
//! sink (`innerHTML` and kin) throws — text from agents, people, tools and models can only be
//! shown as text.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use axum::Router;

use super::Gateway;

const INDEX: &str = include_str!("console/index.html");
const STYLE: &str = include_str!("console/console.css");
const ICON: &str = include_str!("console/icon.svg");
/// The scripts, ES modules: the pages, what they share, the answer forms, the agent page, an
/// agent's cycles and one cycle, rewinding and forking, its rehearsals.
const SCRIPTS: [(&str, &str); 10] = [
    ("console.js", include_str!("console/console.js")),
    ("dom.js", include_str!("console/dom.js")),
    ("schema.js", include_str!("console/schema.js")),
    ("agent.js", include_str!("console/agent.js")),
    ("markdown.js", include_str!("console/markdown.js")),
    ("fleet.js", include_str!("console/fleet.js")),
    ("cycles.js", include_str!("console/cycles.js")),
    ("cycle.js", include_str!("console/cycle.js")),
    ("rewind.js", include_str!("console/rewind.js")),
    ("rehearsals.js", include_str!("console/rehearsals.js")),
];

/// The page's policy: see the module's description.
pub const POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
    connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; \
    frame-ancestors 'none'; require-trusted-types-for 'script'; trusted-types 'none'";

/// The console's routes.
pub fn routes() -> Router<Gateway> {
    let scripts = SCRIPTS.iter().fold(Router::new(), |router, (name, body)| {
        router.route(
            &format!("/console/{name}"),
            get(move || async move { asset(body, "text/javascript; charset=utf-8") }),
        )
    });
    scripts
        // A person who opens the gateway's address lands on the console (not for good: the
        // root may serve something else one day).
        .route("/", get(|| async { Redirect::temporary("/console/") }))
        .route(
            "/console",
            get(|| async { Redirect::permanent("/console/") }),
        )
        .route(
            "/console/",
            get(|| async { asset(INDEX, "text/html; charset=utf-8") }),
        )
        .route(
            "/console/console.css",
            get(|| async { asset(STYLE, "text/css; charset=utf-8") }),
        )
        .route(
            "/console/icon.svg",
            get(|| async { asset(ICON, "image/svg+xml") }),
        )
}

/// An embedded asset with the console's headers.
fn asset(body: &'static str, content_type: &'static str) -> Response {
    let mut response = (StatusCode::OK, body).into_response();
    let h = response.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(POLICY),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scripts_write_no_html() {
        for (name, script) in SCRIPTS {
            for sink in [
                "innerHTML",
                "outerHTML",
                "insertAdjacentHTML",
                "document.write",
                "eval(",
                "new Function",
                "setTimeout('",
            ] {
                assert!(!script.contains(sink), "{name} uses {sink}");
            }
        }
        assert!(
            !INDEX.contains("<script>"),
            "no inline script (the policy forbids it)"
        );
        assert!(!INDEX.contains("style="), "no inline style");
        // (The SVG namespace is a name, not a request.)
        for remote in ["http://", "https://", "//cdn"] {
            let requests = |s: &str| s.replace("http://www.w3.org/2000/svg", "").contains(remote);
            assert!(!requests(INDEX) && !requests(STYLE));
            assert!(SCRIPTS.iter().all(|(_, s)| !requests(s)));
        }
    }
}
