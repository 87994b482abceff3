//! `wasm-ccm import-occm-config`: turns the `cloud.conf` of cloud-provider-openstack
//! (occm), which holds the Keystone secret, into the OpenStack provider's files under
//! `--out`: `cloud-config/cloud.conf` without the secret and the identity settings,
//! `providers/openstack.yaml` (the policy's `keystone` rule), `credentials/…` (for the
//! `wasm-ccm-credentials` Secret) and `cluster-name.yaml` (occm's `--cluster-name`).
//!
//! This module is the command line: its flags, what it prints and its exit code. The
//! work is the `occm-import` crate (`guests/openstack/occm-import/`), which shares occm's
//! `[Global]` keys with the OpenStack provider (`occm-config`).

use std::path::PathBuf;

use occm_import as import;

pub use occm_import::provider_actions;

/// `wasm-ccm import-occm-config`'s arguments.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// occm's cloud.conf.
    pub cloud_conf: PathBuf,
    /// The directory to write into.
    #[arg(long)]
    pub out: PathBuf,
    /// Where the credentials Secret is mounted (the policy names the files there).
    #[arg(long, default_value = "/etc/wasm-ccm/credentials")]
    pub credentials_dir: String,
    /// occm's --cluster-name (a flag, not in cloud.conf), for cluster-name.yaml.
    /// Without it or --occm-deployment: occm's default, `kubernetes` (with a note).
    #[arg(long, value_name = "NAME", conflicts_with = "occm_deployment")]
    pub cluster_name: Option<String>,
    /// occm's Deployment, DaemonSet or Pod as YAML or JSON (`kubectl -n kube-system get
    /// ds openstack-cloud-controller-manager -o yaml`), or a file of its flags: the
    /// --cluster-name occm runs with is read there (`$(CLUSTER_NAME)` from its env).
    #[arg(long, value_name = "FILE")]
    pub occm_deployment: Option<PathBuf>,
    /// With `use-clouds = true`: the clouds.yaml occm reads (copied from its node or
    /// Secret). Without it, cloud.conf's clouds-file, read against cloud.conf's
    /// directory. Only the entry used is written, to credentials/clouds.yaml.
    #[arg(long, value_name = "FILE")]
    pub clouds_file: Option<PathBuf>,
    /// The Keystone token goes only to the catalog's https:// endpoints. Without it,
    /// the policy says `allowPlaintext: true`, as occm sends the token to plain http://
    /// endpoints too.
    #[arg(long)]
    pub https_endpoints_only: bool,
}

/// Runs `wasm-ccm import-occm-config`: the files written and the cluster name on
/// stdout (a note on stderr when it is occm's default), or the error on stderr.
pub fn main(args: Args) -> std::process::ExitCode {
    let options = import::Options {
        cloud_conf: &args.cloud_conf,
        out: &args.out,
        credentials_dir: &args.credentials_dir,
        cluster_name: args.cluster_name.as_deref(),
        occm_deployment: args.occm_deployment.as_deref(),
        clouds_file: args.clouds_file.as_deref(),
        https_endpoints_only: args.https_endpoints_only,
    };
    super::exit::exit_code(import::run(&options).map(|outcome| {
        for path in outcome.written {
            println!("wrote {}", path.display());
        }
        let cluster = outcome.cluster;
        println!("cluster name \"{}\" ({})", cluster.name, cluster.source);
        if cluster.defaulted {
            eprintln!("note: {}", import::default_note(&cluster));
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `import-occm-config`'s arguments as a command line gives them.
    fn args(extra: &[&str]) -> Result<Args, clap::Error> {
        use clap::Parser;
        #[derive(clap::Parser)]
        struct Command {
            #[command(flatten)]
            args: Args,
        }
        let mut words = vec!["import-occm-config", "/in/cloud.conf", "--out", "/out"];
        words.extend_from_slice(extra);
        Command::try_parse_from(words).map(|c| c.args)
    }

    /// The flags: the credentials directory's default, the cluster name given or read
    /// from occm's Deployment, never both.
    #[test]
    fn the_cluster_name_comes_from_one_flag() {
        let plain = args(&[]).unwrap();
        assert_eq!(plain.credentials_dir, "/etc/wasm-ccm/credentials");
        assert_eq!(plain.cluster_name, None);
        assert_eq!(plain.occm_deployment, None);
        let given = args(&["--cluster-name", "prod"]).unwrap();
        assert_eq!(given.cluster_name.as_deref(), Some("prod"));
        let read = args(&["--occm-deployment", "/d.yaml"]).unwrap();
        assert_eq!(read.occm_deployment, Some(PathBuf::from("/d.yaml")));
        assert!(args(&["--cluster-name", "prod", "--occm-deployment", "/d.yaml"]).is_err());
    }
}
