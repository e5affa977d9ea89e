//! `agentfleet gateway`: the process — its token file, Kubernetes tokens, data plane,
//! metrics and listener.

use std::sync::Arc;

use anyhow::Context as _;
use prometheus::Registry;
use tracing::{info, warn};

use super::access::Access;
use super::auth::Tokens;
use super::kubernetes::Reviewer;
use super::{serve, Args, Gateway};
use crate::store::Store;
use crate::telemetry;

/// `agentfleet gateway`.
pub async fn run(args: Args) -> anyhow::Result<()> {
    let tokens = match &args.tokens {
        Some(path) => {
            let tokens = Tokens::load(path)?;
            if tokens.is_empty() && !args.kubernetes_auth {
                warn!(path = %path.display(), "the token file holds no tokens and Kubernetes tokens are not taken: every request will be refused");
            }
            tokens.watch(path.clone(), args.tokens_reload);
            tokens
        }
        None => Tokens::default(),
    };
    let store: Arc<dyn Store> = Arc::new(args.redis.store().context("data plane")?);
    let registry = Registry::new();
    let shutdown = telemetry::shutdown_channel("shutting down the gateway");
    telemetry::data_plane::register(&registry, store.clone(), shutdown.clone())
        .context("registering metrics")?;
    let gw = Gateway::new(store, tokens, args.limits, &registry, shutdown)
        .context("registering metrics")?;
    if let Some(url) = args.public_url {
        gw.set_public_url(url);
    }
    if let Some(url) = args.trace_url {
        gw.set_trace_url(url);
    }
    if args.kubernetes_auth {
        let client = kube::Client::try_default()
            .await
            .context("Kubernetes tokens are taken (--kubernetes-auth), but no cluster configuration was found")?;
        gw.set_access(Access::Rbac(client.clone()));
        gw.set_kubernetes(Reviewer::new(
            client,
            args.kubernetes_audiences,
            args.kubernetes_auth_cache,
        ));
    }
    let listener = tokio::net::TcpListener::bind(args.addr)
        .await
        .with_context(|| format!("listening on {}", args.addr))?;
    info!(addr = %args.addr, tokens = gw.tokens().len(), kubernetes_tokens = args.kubernetes_auth, "gateway serving");
    serve(listener, gw, registry).await.context("serving HTTP")
}
