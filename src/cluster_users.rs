//! Who a Kubernetes identity is here: the one rule that turns the API server's username of a
//! person or a ServiceAccount into the member id spaces, approver lists and messages know, and
//! that names a ServiceAccount as a member. The gateway applies it to what `TokenReview`
//! says; the operator and `dev` to what a Space's `members` name. One home, so both agree.
//!
//! The rule: a username's member id is the username with each `:` written `.` — a member id
//! has no colon, so no one can pose as `service:…` or `group:…` — and it must then be a member
//! id (letters, digits, `-_.@`, at most 128 bytes). A ServiceAccount `NAME` of namespace `NS`
//! is the user `system:serviceaccount:NS:NAME`, so its member id is
//! `system.serviceaccount.NS.NAME`. A username that is not the API server's own (`system:…`)
//! but whose id would start with `system.` is refused: it would pose as a ServiceAccount.

use crate::party::answers::is_human_id;

/// How the API server names a ServiceAccount's user: `system:serviceaccount:NS:NAME`.
const SERVICE_ACCOUNT_USER: &str = "system:serviceaccount:";

/// The member id of the Kubernetes user `username`, or why it cannot be a member.
pub fn member_id(username: &str) -> Result<String, String> {
    let id = username.replace(':', ".");
    if !is_human_id(&id) {
        return Err(format!(
            "the Kubernetes user {:?} cannot be a member: a member id is letters, digits and -_.@ (a colon read as a dot), at most 128 bytes",
            shown(username)
        ));
    }
    if id.starts_with("system.") && !username.starts_with("system:") {
        return Err(format!(
            "the Kubernetes user {:?} cannot be a member: its id would pose as the API server's own system:… users",
            shown(username)
        ));
    }
    Ok(id)
}

/// The member id of a ServiceAccount written `NAME` (in `namespace`) or `NS/NAME`.
pub fn service_account_id(written: &str, namespace: &str) -> Result<String, String> {
    let (ns, name) = written.split_once('/').unwrap_or((namespace, written));
    let dns = |s: &str| {
        !s.is_empty()
            && s.len() <= 253
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
    };
    if !dns(ns) || !dns(name) || ns.contains('.') {
        return Err(format!(
            "{:?} is not a ServiceAccount: NAME or NAMESPACE/NAME, lowercase letters, digits, - and .",
            shown(written)
        ));
    }
    member_id(&format!("{SERVICE_ACCOUNT_USER}{ns}:{name}"))
}

/// Whether `group` may be named as a member or an approver (`group:NAME`): what the party
/// rules take as a group name.
pub fn is_group(group: &str) -> bool {
    crate::party::Subject::parse(&format!("group:{group}")).is_ok()
}

/// At most 200 characters of what a caller or a manifest wrote, for an error.
fn shown(s: &str) -> String {
    s.chars().take(200).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usernames_take_their_member_ids_by_one_rule() {
        let cases: &[(&str, Result<&str, &str>)] = &[
            ("alice@example.com", Ok("alice@example.com")),
            ("alice", Ok("alice")),
            ("oidc:alice@example.com", Ok("oidc.alice@example.com")),
            (
                "system:serviceaccount:ops:ci-bot",
                Ok("system.serviceaccount.ops.ci-bot"),
            ),
            ("system:admin", Ok("system.admin")),
            // A person may not pose as the API server's own users.
            ("system.serviceaccount.ops.ci-bot", Err("pose")),
            ("service:probe", Ok("service.probe")),
            ("https://issuer.example.com#1234", Err("cannot be a member")),
            ("two words", Err("cannot be a member")),
            ("", Err("cannot be a member")),
            (":alice", Err("cannot be a member")),
        ];
        for (username, want) in cases {
            match (member_id(username), want) {
                (Ok(id), Ok(w)) => assert_eq!(id, *w, "{username}"),
                (Err(e), Err(w)) => assert!(e.contains(w), "{username}: {e}"),
                (got, _) => panic!("{username}: {got:?}, wanted {want:?}"),
            }
        }
        let long = "a".repeat(129);
        assert!(member_id(&long).is_err());
    }

    #[test]
    fn service_accounts_are_named_in_or_beside_the_spaces_namespace() {
        assert_eq!(
            service_account_id("ci-bot", "ops").unwrap(),
            "system.serviceaccount.ops.ci-bot"
        );
        assert_eq!(
            service_account_id("tools/ci-bot", "ops").unwrap(),
            "system.serviceaccount.tools.ci-bot"
        );
        for bad in ["", "a/b/c", "Bot", "ops/", "/bot", "a.b/bot", "bot:x"] {
            assert!(service_account_id(bad, "ops").is_err(), "{bad}");
        }
    }

    #[test]
    fn groups_are_what_approver_lists_take() {
        assert!(is_group("sre"));
        assert!(is_group("system:serviceaccounts:ops"));
        assert!(!is_group(""));
        assert!(!is_group("two words"));
    }
}
