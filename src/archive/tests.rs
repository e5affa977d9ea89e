//! The archive against a local directory and a real S3-compatible server.

use super::*;
use crate::store::{Consciousness, Snapshot};
use crate::testing::{s3, S3Server};

/// A small document of `agent` after `cycle` (also the operator's tests' archived checkpoint).
pub(crate) fn doc(agent: &AgentKey, cycle: u64) -> Document {
    Document {
        agent: agent.clone(),
        generation: 1,
        snapshot: Snapshot {
            consciousness: Consciousness {
                cycle,
                messages: vec![format!(r#"{{"role":"user","content":"cycle {cycle}"}}"#)],
                start: cycle,
                tokens: 5,
                digest: format!("sha256:{}", "0".repeat(64)),
                last_cycle_ms: Some(1_795_000_000_000 + cycle as i64),
                ..Consciousness::default()
            },
            notes: Default::default(),
            highest: 0,
        },
    }
}

/// Everything an archive does, against `archive`.
async fn behaves(archive: &Archive) {
    let sre = AgentKey::new("ops", "sre");
    let other = AgentKey::new("ops", "planner");
    assert_eq!(archive.list(&sre).await.unwrap(), []);
    assert_eq!(archive.latest(&sre).await.unwrap(), None);
    assert!(matches!(
        archive.get(&sre, 1).await,
        Err(ArchiveError::NotFound(url)) if url == archive.checkpoint_url(&sre, 1)
    ));
    for cycle in 1..=3 {
        let url = archive.put(&doc(&sre, cycle)).await.unwrap();
        assert_eq!(url, archive.checkpoint_url(&sre, cycle));
        assert!(url.ends_with(&format!("/ops/sre/{cycle}")), "{url}");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    archive.put(&doc(&other, 9)).await.unwrap();
    let mut cycles: Vec<u64> = archive
        .list(&sre)
        .await
        .unwrap()
        .iter()
        .map(|l| l.cycle)
        .collect();
    cycles.sort_unstable();
    assert_eq!(cycles, [1, 2, 3], "only its own");
    assert_eq!(
        archive.latest(&sre).await.unwrap().map(|l| l.cycle),
        Some(3)
    );
    assert_eq!(archive.get(&sre, 2).await.unwrap(), doc(&sre, 2));
    let url = archive.checkpoint_url(&sre, 3);
    assert_eq!(archive.fetch(&url).await.unwrap(), doc(&sre, 3));
    archive.delete(&sre, &[1, 2, 7]).await.unwrap();
    assert_eq!(archive.list(&sre).await.unwrap().len(), 1);
    assert_eq!(archive.purge(&sre).await.unwrap(), 1);
    assert_eq!(archive.list(&sre).await.unwrap(), []);
    assert_eq!(archive.list(&other).await.unwrap().len(), 1, "untouched");
}

#[tokio::test]
async fn a_local_directory_is_an_archive() {
    let dir = std::env::temp_dir().join(format!("agentfleet-archive-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let url = format!("file://{}/checkpoints", dir.display());
    let archive = Archive::open_with(&url, &[]).unwrap();
    assert_eq!(archive.url(), url);
    behaves(&archive).await;
    assert!(dir.join("checkpoints/ops/planner/9").is_file());
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn an_s3_compatible_server_is_an_archive() {
    let server = S3Server::start("fleet").unwrap();
    let archive = Archive::open_with(&server.url("prod"), &server.env()).unwrap();
    assert_eq!(archive.url(), "s3://fleet/prod");
    behaves(&archive).await;
    // A per-agent prefix goes to the same bucket; archiving off is no archive.
    let spec = crate::crd::ArchiveSpec {
        prefix: Some("team-a/".into()),
        ..Default::default()
    };
    let own = archive.for_agent(&spec).unwrap();
    let sre = AgentKey::new("ops", "sre");
    assert_eq!(
        own.put(&doc(&sre, 4)).await.unwrap(),
        "s3://fleet/team-a/ops/sre/4"
    );
    assert!(server.bucket_dir().join("team-a/ops/sre/4").is_file());
    let off = crate::crd::ArchiveSpec {
        enabled: false,
        ..Default::default()
    };
    assert!(archive.for_agent(&off).is_none());
}

#[tokio::test]
async fn corrupt_foreign_and_unknown_documents_are_refused() {
    let server = S3Server::start("fleet").unwrap();
    let archive = Archive::open_with(&server.url("prod"), &server.env()).unwrap();
    let sre = AgentKey::new("ops", "sre");
    archive.put(&doc(&sre, 5)).await.unwrap();
    // Another agent's document where sre's cycle 6 should be.
    let planner = archive
        .put(&doc(&AgentKey::new("ops", "planner"), 6))
        .await
        .unwrap();
    let dir = server.bucket_dir().join("prod/ops");
    std::fs::copy(dir.join("planner/6"), dir.join("sre/6")).unwrap();
    match archive.get(&sre, 6).await {
        Err(e @ ArchiveError::Foreign(_)) => {
            assert_eq!(e.reason(), "ForeignCheckpoint");
            assert!(e.to_string().contains("ops/planner"), "{e}");
        }
        other => panic!("{other:?}"),
    }
    // sre's cycle 5 under the name of cycle 7.
    std::fs::copy(dir.join("sre/5"), dir.join("sre/7")).unwrap();
    assert!(
        matches!(archive.get(&sre, 7).await, Err(ArchiveError::Foreign(w)) if w.contains("holds cycle 5"))
    );
    // One flipped byte.
    let mut bytes = std::fs::read(dir.join("sre/5")).unwrap();
    let n = bytes.len();
    bytes[n - 12] ^= 0x55;
    std::fs::write(dir.join("sre/5"), &bytes).unwrap();
    let err = archive.get(&sre, 5).await.unwrap_err();
    assert_eq!(err.reason(), "CheckpointCorrupt", "{err}");
    assert!(archive.fetch(&planner).await.is_ok());
}

#[tokio::test]
async fn a_store_that_is_away_is_a_clear_error_without_secrets() {
    let server = S3Server::start("fleet").unwrap();
    let sre = AgentKey::new("ops", "sre");
    // Wrong credentials: refused, and the secret given is not in the message.
    let mut env = server.env();
    for (k, v) in &mut env {
        if k == "AWS_SECRET_ACCESS_KEY" {
            *v = "not-the-secret-0a1b2c3d".into();
        }
    }
    let wrong = Archive::open_with(&server.url("prod"), &env).unwrap();
    let err = wrong.put(&doc(&sre, 1)).await.unwrap_err();
    assert_eq!(err.reason(), "StoreUnreachable", "{err}");
    assert!(
        !err.to_string().contains("not-the-secret-0a1b2c3d"),
        "{err}"
    );
    // Down: an error, not a hang.
    let archive = Archive::open_with(&server.url("prod"), &server.env()).unwrap();
    server.stop();
    let started = std::time::Instant::now();
    let err = archive.put(&doc(&sre, 1)).await.unwrap_err();
    assert!(err.is_transient(), "{err}");
    assert!(!err.to_string().contains(s3::SECRET_KEY), "{err}");
    assert!(started.elapsed() < std::time::Duration::from_secs(30));
    // Back: it works again, on the same archive.
    server.resume().unwrap();
    archive.put(&doc(&sre, 1)).await.unwrap();
    assert_eq!(
        archive.latest(&sre).await.unwrap().map(|l| l.cycle),
        Some(1)
    );
}

#[test]
fn urls_that_name_no_archive_are_refused() {
    for url in [
        "redis://x/",
        "file:relative/dir",
        "not a url",
        "https://example.com/x",
    ] {
        let err = Archive::open_with(url, &[]).unwrap_err();
        assert_eq!(err.reason(), "InvalidArchiveUrl", "{url}: {err}");
    }
}

#[test]
fn check_url_accepts_what_open_accepts() {
    for url in [
        "s3://bucket/prefix",
        "s3a://bucket/prefix",
        "gs://bucket/prefix",
        "az://container/prefix",
        "azure://container/prefix",
        "abfs://container@account.dfs.core.windows.net/prefix",
        "abfss://container@account.dfs.core.windows.net/prefix",
        "file:///var/lib/agentfleet/checkpoints",
    ] {
        assert!(check_url(url).is_ok(), "{url}: {:?}", check_url(url));
    }
    for url in [
        "redis://x/",
        "memory:ops/sre#cycle=3",
        "file:relative/dir",
        "not a url",
        "https://example.com/x",
    ] {
        let err = check_url(url).unwrap_err();
        assert_eq!(err.reason(), "InvalidArchiveUrl", "{url}: {err}");
        assert!(Archive::open_with(url, &[]).is_err(), "{url}");
    }
    // What it accepts, open opens (a directory and S3 need nothing from the environment).
    for url in ["s3://bucket/prefix", "file:///tmp/x"] {
        Archive::open_with(url, &[]).unwrap();
    }
}

#[tokio::test]
async fn an_object_holds_the_cycle_its_name_says_and_a_signed_archive_signs() {
    let dir = std::env::temp_dir().join(format!("agentfleet-named-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let url = format!("file://{}/checkpoints", dir.display());
    let key = [(SIGNING_KEY_ENV.to_string(), "k".repeat(MIN_KEY_BYTES))];
    let archive = Archive::open_with(&url, &key).unwrap();
    assert!(archive.signed());
    let sre = AgentKey::new("ops", "sre");
    archive.put(&doc(&sre, 2)).await.unwrap();
    // Cycle 2's document copied over cycle 5's name: the build before issue 26 took it for 5.
    let objects = dir.join("checkpoints/ops/sre");
    std::fs::copy(objects.join("2"), objects.join("5")).unwrap();
    let e = archive
        .fetch(&archive.checkpoint_url(&sre, 5))
        .await
        .unwrap_err();
    assert_eq!(e.reason(), "ForeignCheckpoint");
    assert!(e.to_string().contains("holds cycle 2, not cycle 5"), "{e}");
    // A name that says no cycle says nothing to check.
    std::fs::copy(objects.join("2"), dir.join("checkpoints/good")).unwrap();
    assert_eq!(
        archive.fetch(&format!("{url}/good")).await.unwrap(),
        doc(&sre, 2)
    );
    // The same objects through an archive without the key: read, unverified by signature;
    // through one with another key: refused.
    let plain = Archive::open_with(&url, &[]).unwrap();
    assert!(!plain.signed());
    assert_eq!(plain.get(&sre, 2).await.unwrap(), doc(&sre, 2));
    let other = Archive::open_with(
        &url,
        &[(SIGNING_KEY_ENV.to_string(), "o".repeat(MIN_KEY_BYTES))],
    )
    .unwrap();
    assert_eq!(
        other.get(&sre, 2).await.unwrap_err().reason(),
        "SignatureInvalid"
    );
    // What the unsigned archive wrote, the signed one refuses.
    plain.put(&doc(&sre, 3)).await.unwrap();
    let e = archive.get(&sre, 3).await.unwrap_err();
    assert!(e.to_string().contains("not signed"), "{e}");
    let e = Archive::open_with(&url, &[(SIGNING_KEY_ENV.to_string(), "short".into())]).unwrap_err();
    assert_eq!(e.reason(), "InvalidSigningKey");
    let _ = std::fs::remove_dir_all(&dir);
}
