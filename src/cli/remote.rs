//! Commands through the gateway, as the caller's own identity: `--gateway URL` with `--token`
//! or the current kubeconfig's credentials. The gateway decides with the cluster's RBAC and
//! the spaces' members; without `--gateway` a command reads the data plane directly, which
//! is for `dev` and an operator's break-glass only.

use anyhow::{bail, Context as _};
use serde::de::DeserializeOwned;
use serde::Serialize;

/// The largest answer of the gateway read.
const MAX_ANSWER: usize = 64 << 20;

/// Where an inspecting command goes.
#[derive(clap::Args, Debug, Clone)]
pub struct Via {
    /// Go through the gateway at this URL, as your own identity (RBAC and the spaces'
    /// members decide). Without it the command reads the data plane directly: break-glass,
    /// for operators and `dev`.
    #[arg(long, env = "AGENTFLEET_GATEWAY", value_name = "URL")]
    pub gateway: Option<String>,
    /// The bearer token for the gateway; by default the current kubeconfig context's (its
    /// token, token file or credential plugin, as kubectl uses them).
    #[arg(long, env = "AGENTFLEET_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
}

/// The gateway, as the caller.
pub struct Remote {
    base: String,
    token: String,
    http: reqwest::Client,
}

impl Remote {
    /// The gateway of `via`, or `None` when the command goes to the data plane.
    pub async fn of(via: &Via) -> anyhow::Result<Option<Remote>> {
        let Some(base) = &via.gateway else {
            // Said to a person at a terminal; a script's stderr stays its errors'.
            if std::io::IsTerminal::is_terminal(&std::io::stderr()) {
                eprintln!("note: on the data plane directly (break-glass, for operators and dev); people go through the gateway: --gateway URL");
            }
            return Ok(None);
        };
        let token = match &via.token {
            Some(t) => t.clone(),
            None => super::kubeconfig::token().await?,
        };
        crate::install_crypto_provider();
        Ok(Some(Remote {
            base: base.trim_end_matches('/').to_string(),
            token,
            http: reqwest::Client::builder()
                .build()
                .context("building an HTTP client")?,
        }))
    }

    /// `GET path`, its JSON.
    pub async fn get<T: DeserializeOwned>(&self, path: &str) -> anyhow::Result<T> {
        let request = self.http.get(format!("{}{path}", self.base));
        self.send(request).await
    }

    /// `POST path` with `body`, its JSON.
    pub async fn post<B: Serialize, T: DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
    ) -> anyhow::Result<T> {
        let request = self.http.post(format!("{}{path}", self.base)).json(body);
        self.send(request).await
    }

    async fn send<T: DeserializeOwned>(
        &self,
        request: reqwest::RequestBuilder,
    ) -> anyhow::Result<T> {
        let mut response = request
            .bearer_auth(&self.token)
            .send()
            .await
            .with_context(|| format!("cannot reach the gateway at {}", self.base))?;
        let status = response.status();
        let mut body = Vec::new();
        while let Some(chunk) = response
            .chunk()
            .await
            .with_context(|| format!("reading the gateway's answer ({status})"))?
        {
            if body.len() + chunk.len() > MAX_ANSWER {
                bail!("the gateway's answer is over 64 MiB");
            }
            body.extend_from_slice(&chunk);
        }
        if !status.is_success() {
            let said: Option<crate::api::ErrorBody> = serde_json::from_slice(&body).ok();
            match said {
                Some(e) => bail!("{} ({})", e.error.message, status.as_u16()),
                None => bail!("the gateway answered {status}"),
            }
        }
        serde_json::from_slice(&body).context(
            "the gateway's answer is not what this command reads (is it the same version?)",
        )
    }
}
