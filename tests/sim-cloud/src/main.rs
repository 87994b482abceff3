//! `sim-cloud`: run the simulated cloud as a standalone server.

use anyhow::Context;
use clap::Parser;

/// Serve the simulated cloud API on loopback.
#[derive(Parser)]
#[command(name = "sim-cloud", version, about)]
struct Args {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: String,
    /// File holding the bearer token the API requires.
    #[arg(long, conflicts_with = "token")]
    token_file: Option<std::path::PathBuf>,
    /// The bearer token the API requires.
    #[arg(long, default_value = "sim-cloud-token")]
    token: String,
    /// Create this many running instances named node-1..node-N at start.
    #[arg(long, default_value_t = 0)]
    instances: usize,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let args = Args::parse();
    let token = match &args.token_file {
        Some(path) => std::fs::read_to_string(path)
            .with_context(|| format!("reading --token-file {}", path.display()))?
            .trim()
            .to_owned(),
        None => args.token.clone(),
    };
    let cloud = sim_cloud::SimCloud::start(&args.listen, &token)
        .await
        .with_context(|| format!("listening on {}", args.listen))?;
    cloud.with_state(|s| {
        for i in 1..=args.instances {
            s.create_instance(sim_cloud::model::NewInstance::named(&format!("node-{i}")));
        }
    });
    println!("simulated cloud listening on {}", cloud.url());
    tokio::signal::ctrl_c().await?;
    Ok(())
}
