//! The cloud behind the Nodes: the simulated cloud with the reference provider, or
//! moto with the AWS provider (`CLOUD=aws`), where cloud-provider-aws can run on the
//! same Nodes and instances after wasm-ccm.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use sim_cloud::model::NewInstance;
use wasm_ccm_tests::Stack;
use wasm_ccm_tests::moto::{Moto, Service, World, texts};

/// The cluster's name (the AWS world's `KubernetesClusterID`).
pub const CLUSTER: &str = "scale";

/// A cloud the bench launches instances in and counts requests of.
pub enum Cloud {
    /// The simulated cloud (its requests counted by route) and the reference provider.
    Sim {
        stack: Box<Stack>,
        /// Instance IDs by name.
        ids: HashMap<String, String>,
    },
    /// moto, request authentication on, the AWS provider with its declared IAM policy
    /// (counted by action, the provider's key only).
    Aws {
        moto: Box<Moto>,
        world: Box<World>,
        dir: wasm_ccm_tests::TempDir,
        cloud_config: PathBuf,
        /// Instance IDs by private DNS name (the Node's name).
        ids: HashMap<String, String>,
        /// moto's counts at the last [`Cloud::take_requests`].
        counted: BTreeMap<String, u64>,
        /// Instances launched, for the subnet of the next.
        launched: usize,
    },
}

impl Cloud {
    /// `CLOUD` (`sim`, the default, or `aws`).
    pub async fn start(kind: &str) -> Self {
        match kind {
            "sim" => Cloud::Sim {
                stack: Box::new(Stack::start().await),
                ids: HashMap::new(),
            },
            "aws" => {
                let mut moto = Moto::start().await;
                let world = World::create(&mut moto, CLUSTER).await;
                let dir = wasm_ccm_tests::TempDir::new("scale-aws");
                std::fs::copy(
                    wasm_ccm_tests::guest("aws_provider"),
                    dir.path().join("aws.wasm"),
                )
                .expect("the AWS provider");
                wasm_ccm_tests::aws::install_static_policy(dir.path(), &moto, &world.provider);
                // The same file for both controller managers: cloud-provider-aws needs
                // the subnet and route table (with the VPC and the cluster ID) to start
                // without the instance metadata service.
                let cloud_config = dir.path().join("cloud.conf");
                let config = world.cloud_config(&moto).replacen(
                    "[Global]\n",
                    &format!(
                        "[Global]\nSubnetID = {}\nRouteTableID = {}\n",
                        world.subnets[0], world.route_table
                    ),
                    1,
                );
                std::fs::write(&cloud_config, config).expect("cloud.conf");
                Cloud::Aws {
                    moto: Box::new(moto),
                    world: Box::new(world),
                    dir,
                    cloud_config,
                    ids: HashMap::new(),
                    counted: BTreeMap::new(),
                    launched: 0,
                }
            }
            other => panic!("CLOUD={other}: `sim` or `aws`"),
        }
    }

    /// After the instances of the first Nodes are launched: moto checks every later
    /// request's signature and IAM policy.
    pub async fn lock(&self) {
        if let Cloud::Aws { moto, .. } = self {
            moto.enable_auth(0).await;
        }
    }

    /// `--cloud-provider`.
    pub fn provider(&self) -> &str {
        match self {
            Cloud::Sim { stack, .. } => &stack.provider,
            Cloud::Aws { .. } => "aws",
        }
    }

    /// The providers directory (also the credentials directory).
    pub fn providers_dir(&self) -> &Path {
        match self {
            Cloud::Sim { stack, .. } => stack.dir.dir.path(),
            Cloud::Aws { dir, .. } => dir.path(),
        }
    }

    /// `--cloud-config`.
    pub fn cloud_config(&self) -> &Path {
        match self {
            Cloud::Sim { stack, .. } => &stack.cloud_config,
            Cloud::Aws { cloud_config, .. } => cloud_config,
        }
    }

    /// The pods' CIDR: outside the AWS world's VPC (10.0.0.0/16), so a route to a pod
    /// CIDR is never more specific than the VPC's own.
    pub fn cluster_cidr(&self) -> &'static str {
        match self {
            Cloud::Sim { .. } => "10.0.0.0/8",
            Cloud::Aws { .. } => "100.64.0.0/10",
        }
    }

    /// Launches `count` instances; their Node names (`<prefix>-NNNNN` in the simulated
    /// cloud, the private DNS names on AWS).
    pub async fn launch(&mut self, prefix: &str, first: usize, count: usize) -> Vec<String> {
        let mut names = Vec::with_capacity(count);
        for i in first..first + count {
            let (name, id) = match self {
                Cloud::Sim { stack, .. } => {
                    let name = format!("{prefix}-{i:05}");
                    let instance = stack
                        .cloud
                        .with_state(|s| s.create_instance(NewInstance::named(&name)));
                    (name, instance.id)
                }
                Cloud::Aws {
                    moto,
                    world,
                    launched,
                    ..
                } => {
                    let instance = world.launch(moto, *launched % world.subnets.len()).await;
                    *launched += 1;
                    (instance.private_dns_name, instance.id)
                }
            };
            match self {
                Cloud::Sim { ids, .. } | Cloud::Aws { ids, .. } => ids.insert(name.clone(), id),
            };
            names.push(name);
        }
        names
    }

    /// Terminates the instance of Node `name`.
    pub async fn terminate(&mut self, name: &str) {
        match self {
            Cloud::Sim { stack, ids } => {
                if let Some(id) = ids.remove(name) {
                    stack.cloud.with_state(|s| s.delete_instance(&id));
                }
            }
            Cloud::Aws { moto, ids, .. } => {
                if let Some(id) = ids.remove(name) {
                    moto.call(Service::Ec2, "TerminateInstances", &[("InstanceId.1", &id)])
                        .await;
                }
            }
        }
    }

    /// Removes every route to a pod CIDR, as before a controller manager first starts.
    pub async fn clear_routes(&mut self) {
        match self {
            Cloud::Sim { stack, .. } => stack.cloud.with_state(|s| s.routes.clear()),
            Cloud::Aws { moto, world, .. } => {
                let table = moto
                    .call(
                        Service::Ec2,
                        "DescribeRouteTables",
                        &[("RouteTableId.1", &world.route_table)],
                    )
                    .await;
                for cidr in texts(&table, "destinationCidrBlock") {
                    if cidr.starts_with("100.") {
                        moto.call(
                            Service::Ec2,
                            "DeleteRoute",
                            &[
                                ("RouteTableId", &world.route_table),
                                ("DestinationCidrBlock", &cidr),
                            ],
                        )
                        .await;
                    }
                }
            }
        }
    }

    /// The requests the controllers sent since the last call: by route in the simulated
    /// cloud, by action with the provider's key on AWS (the bench's own calls use
    /// another).
    pub async fn take_requests(&mut self) -> BTreeMap<String, u64> {
        match self {
            Cloud::Sim { stack, .. } => stack
                .cloud
                .with_state(|s| std::mem::take(&mut s.requests).into_iter().collect()),
            Cloud::Aws {
                moto,
                world,
                counted,
                ..
            } => {
                let now = moto.requests().await;
                let prefix = format!("{} ", world.provider.id);
                let mut taken = BTreeMap::new();
                for (key, n) in &now {
                    let Some(action) = key.strip_prefix(&prefix) else {
                        continue;
                    };
                    let before = counted.get(key).copied().unwrap_or(0);
                    if *n > before {
                        taken.insert(action.to_owned(), n - before);
                    }
                }
                *counted = now;
                taken
            }
        }
    }

    /// The environment and flags cloud-provider-aws runs with here: the provider's keys
    /// through the SDK's default chain, every service at moto.
    pub fn upstream_aws(&self, command: &mut tokio::process::Command) {
        let Cloud::Aws {
            moto,
            world,
            cloud_config,
            ..
        } = self
        else {
            panic!("cloud-provider-aws runs against moto only (CLOUD=aws)");
        };
        command.arg(format!("--cloud-config={}", cloud_config.display()));
        wasm_ccm_tests::upstream::aws_ccm_environment(command, &moto.url(), &world.provider);
    }
}
