//! A held rollout on a real API server (issue 45): an Agent with `spec.rollout.rehearse`
//! lives a few cycles; a change of its instructions is held, rehearsed and goes live; a
//! change of its model to one that skips everything fails its rehearsal and the agent stays
//! as it was; an override pushes it through. No kubelet runs the Rehearsals' Jobs: each Job's
//! command runs here, with its pod's arguments, as its pod would.

use clap::Parser;
use k8s_openapi::api::batch::v1::Job;

use super::*;
use agentfleet::crd::Rehearsal;
use agentfleet::testing::{MockModel, MockTurn};

/// The `agentfleet rehearse` command line, as a Job's container runs it.
#[derive(Parser)]
struct Rehearse {
    #[command(flatten)]
    args: agentfleet::worker::rehearsal::command::Args,
}

fn rollout_condition(agent: &Agent) -> Option<(String, String, String)> {
    let c = agent
        .status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == "Rollout")?;
    Some((c.status.clone(), c.reason.clone(), c.message.clone()))
}

/// The rendered manifest the worker reads.
async fn rendered(configmaps: &Api<ConfigMap>) -> String {
    let cm = configmaps.get("rehearsed-agent").await.unwrap();
    cm.data.unwrap()["agent.yaml"].clone()
}

/// Runs the Job of the Rehearsal the rollout of revision `rev` made, as its pod would: its
/// arguments, the candidate's manifest from its ConfigMap, the data plane's URL.
async fn run_job(client: &Client, ns: &str, redis: &str, rehearsal: &str) {
    let jobs: Api<Job> = Api::namespaced(client.clone(), ns);
    let name = format!("{rehearsal}-rehearsal-1");
    let job = eventually("the rehearsal's Job", Duration::from_secs(15), || {
        let jobs = jobs.clone();
        let name = name.clone();
        async move { jobs.get(&name).await.ok() }
    })
    .await;
    let pod = job.spec.unwrap().template.spec.unwrap();
    assert_eq!(pod.automount_service_account_token, Some(false));
    assert_eq!(pod.restart_policy.as_deref(), Some("Never"));
    let args = pod.containers[0].args.clone().unwrap();
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let candidate = configmaps
        .get(&format!("{rehearsal}-rehearsal"))
        .await
        .unwrap()
        .data
        .unwrap()["agent.yaml"]
        .clone();
    let file = std::env::temp_dir().join(format!("{rehearsal}-{}.yaml", std::process::id()));
    std::fs::write(&file, candidate).unwrap();
    let mut argv: Vec<String> = vec!["agentfleet".into()];
    argv.extend(args.into_iter().skip(1).map(|a| {
        if a == "/etc/agentfleet/agent/agent.yaml" {
            file.display().to_string()
        } else {
            a
        }
    }));
    argv.extend(["--redis".to_string(), redis.to_string()]);
    let command = Rehearse::try_parse_from(&argv).unwrap();
    agentfleet::worker::rehearsal::command::run(command.args)
        .await
        .unwrap();
    let _ = std::fs::remove_file(file);
}

pub(super) async fn held_rollout(client: &Client, ns: &str, store: &Arc<RedisStore>, redis: &str) {
    eprintln!("step: a held rollout: rehearsed, passed, failed, overridden");
    let agents: Api<Agent> = Api::namespaced(client.clone(), ns);
    let rehearsals: Api<Rehearsal> = Api::namespaced(client.clone(), ns);
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let events: Api<Event> = Api::namespaced(client.clone(), ns);
    let manifest = apply_yaml(
        &agents,
        "{apiVersion: agentfleet.dev/v1alpha1, kind: Agent, metadata: {name: rehearsed}, spec: {model: {provider: scripted, name: rehearsed}, instructions: You help the family., spaces: [family], consciousness: {checkpointsRetained: 20}, rollout: {rehearse: {cycles: 3}}}}",
    )
    .await;
    let first = eventually("the first revision runs", Duration::from_secs(15), || {
        let agents = agents.clone();
        async move {
            let a = agents.get("rehearsed").await.ok()?;
            let (status, _, _) = rollout_condition(&a)?;
            let revision = a.status?.rollout?.revision;
            (status == "True").then_some(revision)
        }
    })
    .await;

    // Its life: three cycles, in a worker of its own on the same data plane.
    let key = AgentKey::new(ns, "rehearsed");
    let (stop, worker) = super::pod(&manifest, &key, store);
    for (i, text) in [
        "rehearsed, please remember that dinner is at 8",
        "rehearsed, what do you remember?",
        "hello rehearsed",
    ]
    .into_iter()
    .enumerate()
    {
        husam_posts(store, ns, text).await;
        eventually("the cycle's record", Duration::from_secs(15), || {
            let store = store.clone();
            let key = key.clone();
            async move {
                let heads = store.cycle_heads(&key, None, 10).await.ok()?;
                (heads.len() > i).then_some(())
            }
        })
        .await;
    }
    let _ = stop.send(true);
    worker.await.unwrap();

    // New instructions: held while rehearsed, the worker kept on the old ones.
    agents
        .patch(
            "rehearsed",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"instructions": "You help the family, briefly."}})),
        )
        .await
        .unwrap();
    let held = eventually("the change held", Duration::from_secs(15), || {
        let agents = agents.clone();
        async move {
            let a = agents.get("rehearsed").await.ok()?;
            let (_, reason, _) = rollout_condition(&a)?;
            let rehearsal = a.status?.rollout?.rehearsal;
            (reason == "Held").then_some(rehearsal)?
        }
    })
    .await;
    assert!(rendered(&configmaps)
        .await
        .contains("instructions: You help the family.\n"));
    run_job(client, ns, redis, &held).await;
    eventually(
        "the change passed and runs",
        Duration::from_secs(30),
        || {
            let agents = agents.clone();
            let configmaps = configmaps.clone();
            async move {
                let a = agents.get("rehearsed").await.ok()?;
                let (status, reason, _) = rollout_condition(&a)?;
                let live = rendered(&configmaps).await.contains("briefly");
                (status == "True" && reason == "Passed" && live).then_some(())
            }
        },
    )
    .await;
    let passed = rehearsals.get(&held).await.unwrap().status.unwrap();
    let summary = passed.summary.unwrap();
    assert!(summary.passed && summary.rehearsed == 3, "{summary:?}");
    // The status names the tools called, never their arguments.
    let shown = serde_json::to_string(&passed.cycles).unwrap();
    assert!(
        shown.contains("set_memories") && !shown.contains("dinner"),
        "{shown}"
    );

    // A model that skips everything: it fails, and the agent stays as it was.
    let quiet =
        MockModel::responding(|_| MockTurn::tools(&[("skip", json!({"reason": "quiet today"}))]))
            .await
            .unwrap();
    agents
        .patch(
            "rehearsed",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"model": {"provider": "openai", "name": "quiet", "baseUrl": quiet.base_url}}})),
        )
        .await
        .unwrap();
    let held = eventually("the model change held", Duration::from_secs(15), || {
        let agents = agents.clone();
        async move {
            let a = agents.get("rehearsed").await.ok()?;
            let rollout = a.status?.rollout?;
            rollout.candidate.as_ref()?;
            rollout.rehearsal
        }
    })
    .await;
    run_job(client, ns, redis, &held).await;
    let (_, _, why) = eventually("the model change failed", Duration::from_secs(30), || {
        let agents = agents.clone();
        async move {
            let a = agents.get("rehearsed").await.ok()?;
            rollout_condition(&a).filter(|(s, r, _)| s == "False" && r == "RehearsalFailed")
        }
    })
    .await;
    eprintln!("  {why}");
    assert!(
        why.contains("replied or stayed quiet as recorded in 0 of 3 cycles"),
        "{why}"
    );
    assert!(rendered(&configmaps).await.contains("provider: scripted"));
    eventually(
        "a Warning event on the agent",
        Duration::from_secs(15),
        || {
            let events = events.clone();
            async move { find_event(&events, "Warning", "RehearsalFailed", "rehearsed").await }
        },
    )
    .await;

    // Pushed through.
    let rev = agents
        .get("rehearsed")
        .await
        .unwrap()
        .status
        .unwrap()
        .rollout
        .unwrap()
        .candidate
        .unwrap();
    assert_ne!(rev, first);
    agents
        .patch(
            "rehearsed",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"annotations": {"agentfleet.dev/rollout-override": rev}}}),
            ),
        )
        .await
        .unwrap();
    eventually("the override runs", Duration::from_secs(15), || {
        let agents = agents.clone();
        let configmaps = configmaps.clone();
        async move {
            let a = agents.get("rehearsed").await.ok()?;
            let (_, reason, _) = rollout_condition(&a)?;
            let live = rendered(&configmaps).await.contains("provider: openai");
            (reason == "Overridden" && live).then_some(())
        }
    })
    .await;
}
