//! The caller's own identity for the gateway, as `kubectl` finds it: the current kubeconfig
//! context's user — its bearer token, its token file, or the token its exec credential
//! plugin (an OIDC login plugin, a cloud's) prints. Client certificates are not bearer
//! tokens: such a user is told to give `--token`.

use std::process::Stdio;
use std::time::Duration;

use anyhow::{bail, Context as _};
use kube::config::{ExecConfig, Kubeconfig};
use secrecy::ExposeSecret;

/// How long an exec plugin may take (an interactive login is not waited for).
const EXEC_TIMEOUT: Duration = Duration::from_secs(60);

/// The largest answer of an exec plugin read.
const MAX_EXEC_OUTPUT: usize = 1 << 20;

/// The bearer token of the current kubeconfig context.
pub async fn token() -> anyhow::Result<String> {
    let config =
        Kubeconfig::read().context("no --token given, and no kubeconfig to take one from")?;
    let context_name = config
        .current_context
        .clone()
        .context("no --token given, and the kubeconfig has no current context")?;
    let user = config
        .contexts
        .iter()
        .find(|c| c.name == context_name)
        .and_then(|c| c.context.as_ref())
        .and_then(|c| c.user.clone())
        .with_context(|| format!("the kubeconfig's context {context_name:?} names no user"))?;
    let auth = config
        .auth_infos
        .iter()
        .find(|a| a.name == user)
        .and_then(|a| a.auth_info.clone())
        .with_context(|| format!("the kubeconfig has no user {user:?}"))?;
    if let Some(token) = &auth.token {
        return Ok(token.expose_secret().trim().to_string());
    }
    if let Some(file) = &auth.token_file {
        let token = std::fs::read_to_string(file).with_context(|| {
            format!("reading the token file {file} of kubeconfig user {user:?}")
        })?;
        return Ok(token.trim().to_string());
    }
    if let Some(exec) = &auth.exec {
        return exec_token(exec)
            .await
            .with_context(|| format!("the credential plugin of kubeconfig user {user:?}"));
    }
    bail!("the kubeconfig user {user:?} signs in without a bearer token (a client certificate?): give --token, for example from `kubectl create token`")
}

/// The token an exec credential plugin prints (`ExecCredential`'s `status.token`).
async fn exec_token(exec: &ExecConfig) -> anyhow::Result<String> {
    let command = exec.command.as_deref().context("it names no command")?;
    let mut cmd = tokio::process::Command::new(command);
    cmd.args(exec.args.iter().flatten())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true);
    for env in exec.env.iter().flatten() {
        if let (Some(name), Some(value)) = (env.get("name"), env.get("value")) {
            cmd.env(name, value);
        }
    }
    for name in exec.drop_env.iter().flatten() {
        cmd.env_remove(name);
    }
    let api_version = exec
        .api_version
        .clone()
        .unwrap_or_else(|| "client.authentication.k8s.io/v1".into());
    cmd.env(
        "KUBERNETES_EXEC_INFO",
        serde_json::json!({"apiVersion": api_version, "kind": "ExecCredential", "spec": {"interactive": false}})
            .to_string(),
    );
    let output = tokio::time::timeout(EXEC_TIMEOUT, cmd.output())
        .await
        .with_context(|| {
            format!(
                "{command} did not answer within {}s",
                EXEC_TIMEOUT.as_secs()
            )
        })?
        .with_context(|| format!("running {command}"))?;
    if !output.status.success() {
        bail!("{command} failed ({})", output.status);
    }
    if output.stdout.len() > MAX_EXEC_OUTPUT {
        bail!("{command} printed more than 1 MiB");
    }
    let credential: serde_json::Value = serde_json::from_slice(&output.stdout)
        .with_context(|| format!("{command} did not print an ExecCredential"))?;
    credential["status"]["token"]
        .as_str()
        .filter(|t| !t.is_empty())
        .map(str::to_string)
        .with_context(|| {
            format!(
                "{command} gave no token (a client certificate is no bearer token: give --token)"
            )
        })
}
