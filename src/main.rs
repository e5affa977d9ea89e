use std::io::Write as _;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use agentfleet::telemetry::{self, LogFormat};
use agentfleet::terminal::{sanitize, Breaks};

/// Runs fleets of living LLM agents on Kubernetes.
#[derive(Parser, Debug)]
#[command(name = "agentfleet", version, about)]
struct Cli {
    /// Log line format.
    #[arg(long, global = true, env = "AGENTFLEET_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the Agent, Space and Pool controllers.
    Operator(Box<agentfleet::operator::Args>),
    /// Chat in a space through the gateway, as a human member.
    Chat(Box<agentfleet::chat::Args>),
    /// Run everything on this machine from a directory of manifests: no cluster, no Redis.
    Dev(Box<agentfleet::dev::Args>),
    /// Serve spaces over HTTP and SSE to humans and services.
    Gateway(Box<agentfleet::gateway::Args>),
    /// Run one agent's process loop.
    Worker(Box<agentfleet::worker::Args>),
    /// Run many Agents of one namespace in one process.
    Pool(Box<agentfleet::worker::pool::command::Args>),
    /// Post to and read a space of the data plane.
    #[command(subcommand)]
    Space(agentfleet::cli::SpaceCommand),
    /// Show an agent's consciousness and checkpoints, or restore a checkpoint.
    #[command(subcommand)]
    Consciousness(agentfleet::cli::ConsciousnessCommand),
    /// Show what an agent's cycles did: the list, or one cycle's steps, calls and results.
    Trace(agentfleet::cli::TraceCommand),
    /// Answer an agent's paused tool call, or list what waits for a human.
    #[command(flatten)]
    Calls(agentfleet::cli::CallCommand),
    /// Try a change of an agent (model, instructions, tools) on its last recorded cycles,
    /// with no effects, and compare what it decides.
    Rehearse(Box<agentfleet::worker::rehearsal::command::Args>),
    /// Print every CustomResourceDefinition as YAML.
    Crd,
}

impl Command {
    /// The process's role in its traces' service name (`agentfleet-worker`).
    fn role(&self) -> &'static str {
        match self {
            Command::Operator(_) => "operator",
            Command::Chat(_) => "chat",
            Command::Dev(_) => "dev",
            Command::Gateway(_) => "gateway",
            Command::Worker(_) => "worker",
            Command::Pool(_) => "pool",
            Command::Rehearse(_) => "rehearse",
            Command::Space(_)
            | Command::Consciousness(_)
            | Command::Trace(_)
            | Command::Calls(_)
            | Command::Crd => "cli",
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // The tools whose output is meant for a pipe (`agentfleet space read … | head`).
    let prints = matches!(
        cli.command,
        Command::Crd
            | Command::Space(_)
            | Command::Consciousness(_)
            | Command::Trace(_)
            | Command::Calls(_)
            | Command::Rehearse(_)
    );
    let result = run(cli);
    match result {
        Ok(()) => ExitCode::SUCCESS,
        // The reader went away before the output ended: it wanted no more, as with any
        // filter; not an error (their only bare I/O error is a write to stdout).
        Err(e) if prints && is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            // An error may quote what a server or a file said: shown, never obeyed; each
            // cause once.
            let text = sanitize(&agentfleet::report::chain(&*e), Breaks::Indent(2));
            eprintln!("agentfleet: {text}");
            // A refused answer to a tool call says why in its code (`agentfleet approve`); a
            // rehearsal that ran and failed its criteria is told from one that could not run.
            if e.is::<agentfleet::worker::rehearsal::command::Failed>() {
                return ExitCode::from(agentfleet::worker::rehearsal::command::FAILED_EXIT);
            }
            e.downcast_ref::<agentfleet::decisions::Refusal>()
                .map_or(ExitCode::FAILURE, |r| ExitCode::from(r.exit_code()))
        }
    }
}

fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.downcast_ref::<std::io::Error>()
        .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?)
}

/// Runs the command, logging (and exporting spans, when asked) from the start; the spans not
/// exported yet are flushed before it returns, whatever the outcome.
fn run(cli: Cli) -> anyhow::Result<()> {
    let role = cli.command.role();
    if let Command::Crd = cli.command {
        telemetry::init_tracing(cli.log_format, role).shutdown();
        let yaml = agentfleet::crd::render_all()?;
        return Ok(std::io::stdout().write_all(yaml.as_bytes())?);
    }
    let rt = runtime()?;
    // The span exporter's batch task runs on this runtime: it is started inside it, and shut
    // down after `block_on` has returned, while the runtime still runs.
    let inside = rt.enter();
    let telemetry = telemetry::init_tracing(cli.log_format, role);
    let result = rt.block_on(async move {
        match cli.command {
            Command::Operator(args) => agentfleet::operator::run(*args).await,
            Command::Chat(args) => agentfleet::chat::run(*args).await,
            Command::Dev(args) => agentfleet::dev::run(*args).await,
            Command::Gateway(args) => agentfleet::gateway::run(*args).await,
            Command::Worker(args) => agentfleet::worker::run(*args).await,
            Command::Pool(args) => agentfleet::worker::pool::command::run(*args).await,
            Command::Rehearse(args) => agentfleet::worker::rehearsal::command::run(*args).await,
            Command::Space(cmd) => agentfleet::cli::space(cmd).await,
            Command::Consciousness(cmd) => agentfleet::cli::consciousness(cmd).await,
            Command::Calls(cmd) => agentfleet::cli::calls(cmd).await,
            Command::Trace(cmd) => agentfleet::cli::trace(cmd).await,
            Command::Crd => Ok(()),
        }
    });
    telemetry.shutdown();
    drop(inside);
    result
}
