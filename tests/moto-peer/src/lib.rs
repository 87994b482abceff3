//! moto, the AWS emulator, as a peer for the tests and the playground: its server
//! started on 127.0.0.1, a small signed Query-protocol client for setting up and
//! inspecting its state, and a [`World`] (VPC, subnets, route table, instances, IAM
//! users and a role) for the AWS provider.
//!
//! `scripts/ensure-moto.sh` installs the pinned moto into the tools venv and sets
//! `MOTO_SERVER`; every request goes to 127.0.0.1. The server runs with what AWS does
//! and moto does not where a controller depends on it (`src/aws_defaults.py`: a
//! Classic Load Balancer's default health check).

use std::time::{Duration, Instant, SystemTime};

use aws_credential_types::Credentials;
use aws_sigv4::http_request::{SignableBody, SignableRequest, SigningSettings, sign};
use aws_sigv4::sign::v4;
use aws_smithy_runtime_api::client::identity::Identity;

/// The account moto uses.
pub const ACCOUNT: &str = "123456789012";
/// The region of every test.
pub const REGION: &str = "us-east-1";

/// An access key pair.
#[derive(Debug, Clone)]
pub struct Keys {
    pub id: String,
    pub secret: String,
    pub session_token: Option<String>,
}

impl Keys {
    /// Keys for a moto without authentication (any key is accepted).
    pub fn anonymous() -> Self {
        Self {
            id: "AKIAIOSFODNN7EXAMPLE".into(),
            secret: "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY".into(),
            session_token: None,
        }
    }
}

/// The moto server program run with AWS's defaults that moto lacks.
const AWS_DEFAULTS: &str = include_str!("aws_defaults.py");

/// A running moto server, stopped on drop.
pub struct Moto {
    child: tokio::process::Child,
    pub port: u16,
    client: reqwest::Client,
    /// The keys the test's own calls are signed with.
    pub keys: Keys,
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

/// A service the client calls.
#[derive(Debug, Clone, Copy)]
pub enum Service {
    Ec2,
    /// Classic Elastic Load Balancing.
    Elb,
    Elbv2,
    Iam,
    Sts,
}

impl Service {
    fn signing_name(self) -> &'static str {
        match self {
            Service::Ec2 => "ec2",
            Service::Elb | Service::Elbv2 => "elasticloadbalancing",
            Service::Iam => "iam",
            Service::Sts => "sts",
        }
    }

    fn version(self) -> &'static str {
        match self {
            Service::Ec2 => "2016-11-15",
            Service::Elb => "2012-06-01",
            Service::Elbv2 => "2015-12-01",
            Service::Iam => "2010-05-08",
            Service::Sts => "2011-06-15",
        }
    }
}

impl Moto {
    /// The moto server program: `$MOTO_SERVER`, else the tools venv's.
    pub fn program() -> std::path::PathBuf {
        std::env::var_os("MOTO_SERVER")
            .map(Into::into)
            .unwrap_or_else(|| {
                std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join("../../target/tools-venv/bin/moto_server")
            })
    }

    /// Starts [`Moto::program`] on a free port of 127.0.0.1 and waits until it answers.
    /// Panics when it cannot (a test peer).
    pub async fn start() -> Self {
        Self::try_start().await.unwrap_or_else(|e| panic!("{e}"))
    }

    /// Starts [`Moto::program`] on a free port of 127.0.0.1 and waits until it answers.
    pub async fn try_start() -> Result<Self, String> {
        let server = Self::program();
        if !server.exists() {
            return Err(format!(
                "{} is missing: install moto with `source scripts/ensure-moto.sh` (scripts/test.sh does), or set MOTO_SERVER",
                server.display()
            ));
        }
        let port =
            loopback_port::reserve().map_err(|e| format!("no free port on 127.0.0.1: {e}"))?;
        // moto's server through the Python next to it, with AWS's defaults moto lacks
        // (aws_defaults.py).
        let python = server.with_file_name("python");
        let mut command = tokio::process::Command::new(if python.exists() {
            python.as_os_str()
        } else {
            std::ffi::OsStr::new("python3")
        });
        // SIGKILL when the thread that started it ends, so a test killed on a timeout
        // (whose drops never run) leaves no moto_server behind. SAFETY: prctl(2) only,
        // between fork and exec: async-signal-safe.
        unsafe {
            command.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let child = command
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .args([
                "-c",
                AWS_DEFAULTS,
                "-H",
                "127.0.0.1",
                "-p",
                &port.to_string(),
            ])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("starting {}: {e}", server.display()))?;
        // reqwest is built without a default TLS provider (as the host's is).
        ensure_crypto_provider();
        let client = reqwest::Client::builder().no_proxy().build().unwrap();
        let moto = Self {
            child,
            port,
            client,
            keys: Keys::anonymous(),
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let ready = moto
                .client
                .get(format!("{}/moto-api/", moto.url()))
                .send()
                .await
                .is_ok_and(|r| r.status().is_success());
            if ready {
                return Ok(moto);
            }
            if Instant::now() > deadline {
                return Err("moto did not start within 60s".into());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Turns request authentication on: after `free` more requests, every request
    /// must be signed with a key moto's IAM knows and be allowed by its policies.
    pub async fn enable_auth(&self, free: u32) {
        let response = self
            .client
            .post(format!("{}/moto-api/reset-auth", self.url()))
            .body(free.to_string())
            .send()
            .await
            .unwrap();
        assert!(response.status().is_success(), "reset-auth");
    }

    /// Calls `action` signed with `keys`; the answer's text, or the error's.
    pub async fn call_as(
        &self,
        keys: &Keys,
        service: Service,
        action: &str,
        params: &[(&str, &str)],
    ) -> Result<String, String> {
        let body = {
            let mut body = url::form_urlencoded::Serializer::new(String::new());
            body.append_pair("Action", action)
                .append_pair("Version", service.version());
            for (k, v) in params {
                body.append_pair(k, v);
            }
            body.finish()
        };
        let url = format!("{}/", self.url());
        let content_type = "application/x-www-form-urlencoded; charset=utf-8";
        // Signed in a block of its own: the signer's values are not `Send`, so none may
        // live across an await (the playground's kubelets call this from a spawned task).
        let request = {
            let identity: Identity = Credentials::new(
                &keys.id,
                &keys.secret,
                keys.session_token.clone(),
                None,
                "test",
            )
            .into();
            let params = v4::SigningParams::builder()
                .identity(&identity)
                .region(REGION)
                .name(service.signing_name())
                .time(SystemTime::now())
                .settings(SigningSettings::default())
                .build()
                .unwrap()
                .into();
            let headers = [("content-type", content_type)];
            let signable = SignableRequest::new(
                "POST",
                &url,
                headers.into_iter(),
                SignableBody::Bytes(body.as_bytes()),
            )
            .unwrap();
            let (instructions, _) = sign(signable, &params).unwrap().into_parts();
            let mut request = self
                .client
                .post(&url)
                .header("content-type", content_type)
                .body(body.clone());
            for (name, value) in instructions.headers() {
                request = request.header(name, value);
            }
            request
        };
        let response = request.send().await.map_err(|e| e.to_string())?;
        let status = response.status();
        let text = response.text().await.map_err(|e| e.to_string())?;
        if status.is_success() {
            Ok(text)
        } else {
            Err(format!("{action}: HTTP {status}: {text}"))
        }
    }

    /// The private DNS names (Nodes' names on AWS) of the running instances, in one
    /// `DescribeInstances`; `None` when moto cannot be asked.
    pub async fn running_instances(&self) -> Option<std::collections::HashSet<String>> {
        let xml = self
            .try_call(
                Service::Ec2,
                "DescribeInstances",
                &[
                    ("Filter.1.Name", "instance-state-name"),
                    ("Filter.1.Value.1", "running"),
                ],
            )
            .await
            .ok()?;
        let doc = roxmltree::Document::parse(&xml).ok()?;
        Some(
            doc.descendants()
                .filter(|n| n.is_element() && n.tag_name().name() == "privateDnsName")
                // The instance's own name, not one of its network interfaces'.
                .filter(|n| {
                    n.parent()
                        .and_then(|p| p.parent())
                        .is_some_and(|set| set.tag_name().name() == "instancesSet")
                })
                .filter_map(|n| n.text().map(str::to_owned))
                .collect(),
        )
    }

    /// The ingress rules of security group `group`, one per source, sorted; `None`
    /// when the group does not exist.
    pub async fn ingress(&self, group: &str) -> Option<Vec<IngressRule>> {
        let xml = match self
            .try_call(
                Service::Ec2,
                "DescribeSecurityGroups",
                &[("GroupId.1", group)],
            )
            .await
        {
            Ok(xml) => xml,
            Err(e) if e.contains("InvalidGroup.NotFound") => return None,
            Err(e) => panic!("{e}"),
        };
        let doc = roxmltree::Document::parse(&xml).unwrap();
        let mut rules = Vec::new();
        let group_item = doc
            .descendants()
            .find(|n| n.is_element() && n.tag_name().name() == "securityGroupInfo")
            .and_then(|l| l.children().find(|c| c.is_element()))?;
        for permission in child_items(group_item, "ipPermissions") {
            let (protocol, from, to) = (
                child_text(permission, "ipProtocol"),
                child_text(permission, "fromPort"),
                child_text(permission, "toPort"),
            );
            for (list, field) in [("ipRanges", "cidrIp"), ("groups", "groupId")] {
                for source in child_items(permission, list) {
                    rules.push(IngressRule {
                        protocol: protocol.clone(),
                        from: from.clone(),
                        to: to.clone(),
                        source: child_text(source, field),
                        description: child_text(source, "description"),
                    });
                }
            }
        }
        rules.sort();
        Some(rules)
    }

    /// Calls `action` with the test's keys; the answer's text, or the error's.
    pub async fn try_call(
        &self,
        service: Service,
        action: &str,
        params: &[(&str, &str)],
    ) -> Result<String, String> {
        self.call_as(&self.keys, service, action, params).await
    }

    /// The names of every Network Load Balancer.
    pub async fn load_balancer_names(&self) -> Result<Vec<String>, String> {
        let xml = self
            .try_call(Service::Elbv2, "DescribeLoadBalancers", &[])
            .await?;
        Ok(texts(&xml, "LoadBalancerName"))
    }

    /// The names of every Classic Load Balancer.
    pub async fn classic_load_balancer_names(&self) -> Result<Vec<String>, String> {
        let xml = self
            .try_call(Service::Elb, "DescribeLoadBalancers", &[])
            .await?;
        Ok(texts(&xml, "LoadBalancerName"))
    }

    /// The names of every target group (moto answers `TargetGroupNotFound` when there
    /// are none).
    pub async fn target_group_names(&self) -> Result<Vec<String>, String> {
        match self
            .try_call(Service::Elbv2, "DescribeTargetGroups", &[])
            .await
        {
            Ok(xml) => Ok(texts(&xml, "TargetGroupName")),
            Err(e) if e.contains("TargetGroupNotFound") => Ok(Vec::new()),
            Err(e) => Err(e),
        }
    }

    /// Calls `action` with the test's keys; panics on errors.
    pub async fn call(&self, service: Service, action: &str, params: &[(&str, &str)]) -> String {
        self.try_call(service, action, params)
            .await
            .unwrap_or_else(|e| panic!("{e}"))
    }
}

/// Every text of elements named `name` (local name), in document order.
pub fn texts(xml: &str, name: &str) -> Vec<String> {
    let doc = roxmltree::Document::parse(xml).unwrap_or_else(|e| panic!("{e}: {xml}"));
    doc.descendants()
        .filter(|n| n.is_element() && n.tag_name().name() == name)
        .map(|n| n.text().unwrap_or_default().trim().to_owned())
        .collect()
}

/// The text at `path` in `xml`: below the first element named `path[0]` that has
/// them, its children named by the rest; "" when there is none.
pub fn text_at(xml: &str, path: &[&str]) -> String {
    let doc = roxmltree::Document::parse(xml).unwrap_or_else(|e| panic!("{e}: {xml}"));
    doc.descendants()
        .filter(|n| n.is_element() && n.tag_name().name() == path[0])
        .find_map(|start| path[1..].iter().try_fold(start, |n, name| child(n, name)))
        .and_then(|n| n.text())
        .unwrap_or_default()
        .trim()
        .to_owned()
}

/// The first text of an element named `name`.
pub fn text(xml: &str, name: &str) -> String {
    texts(xml, name)
        .into_iter()
        .next()
        .unwrap_or_else(|| panic!("no <{name}> in {xml}"))
}

fn child<'a, 'i>(n: roxmltree::Node<'a, 'i>, name: &str) -> Option<roxmltree::Node<'a, 'i>> {
    n.children()
        .find(|c| c.is_element() && c.tag_name().name() == name)
}

fn child_text(n: roxmltree::Node<'_, '_>, name: &str) -> String {
    child(n, name)
        .and_then(|c| c.text())
        .unwrap_or_default()
        .trim()
        .to_owned()
}

fn child_items<'a, 'i>(n: roxmltree::Node<'a, 'i>, name: &str) -> Vec<roxmltree::Node<'a, 'i>> {
    child(n, name)
        .map(|l| l.children().filter(|c| c.is_element()).collect())
        .unwrap_or_default()
}

/// One ingress rule of a security group (one source).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct IngressRule {
    pub protocol: String,
    /// "" for every protocol (`-1`).
    pub from: String,
    pub to: String,
    /// A CIDR or a security group ID.
    pub source: String,
    pub description: String,
}

/// An instance the world launched.
#[derive(Debug, Clone)]
pub struct LaunchedInstance {
    pub id: String,
    pub zone: String,
    pub private_dns_name: String,
    pub private_ip: String,
}

/// What [`World::create`] set up in moto.
#[derive(Debug, Clone)]
pub struct World {
    pub cluster_id: String,
    pub vpc: String,
    pub subnets: Vec<String>,
    /// The subnets' CIDR blocks.
    pub subnet_cidrs: Vec<String>,
    pub route_table: String,
    /// The nodes' security group, tagged for the cluster (every launched instance is
    /// in it), holding [`World::node_rules_at_start`].
    pub node_security_group: String,
    /// Keys of an IAM user allowed everything (the test's own calls).
    pub admin: Keys,
    /// Keys of the IAM user the provider uses (EC2 and ELB only).
    pub provider: Keys,
    /// A role for web identity, allowed EC2 and ELB.
    pub role_arn: String,
}

const ALLOW_ALL: &str =
    r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"*","Resource":"*"}]}"#;
/// The provider's own IAM policy, exactly as its README tells users to grant it: a call
/// the policy does not allow fails here as it would on AWS.
const ALLOW_CCM: &str = include_str!("../../../guests/aws/iam-policy.json");
const TRUST_WEB_IDENTITY: &str = r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"Federated":"arn:aws:iam::123456789012:oidc-provider/oidc.eks.us-east-1.amazonaws.com/id/TEST"},"Action":"sts:AssumeRoleWithWebIdentity"}]}"#;

/// The actions of the provider's IAM policy (`guests/aws/iam-policy.json`): the
/// `allowedActions` of its credential rule, as `deploy/aws` ships it.
pub fn provider_actions() -> Vec<String> {
    let policy: serde_json::Value = serde_json::from_str(ALLOW_CCM).expect("iam-policy.json");
    policy["Statement"][0]["Action"]
        .as_array()
        .expect("Action list")
        .iter()
        .map(|a| a.as_str().expect("action").to_owned())
        .collect()
}

impl World {
    /// A VPC with two public subnets (us-east-1a, us-east-1b) tagged for load
    /// balancers and the cluster, a route table tagged for the cluster, and IAM
    /// users. Run before authentication is turned on.
    pub async fn create(moto: &mut Moto, cluster_id: &str) -> Self {
        let admin = user(moto, "admin", ALLOW_ALL).await;
        let provider = user(moto, "wasm-ccm", ALLOW_CCM).await;
        moto.call(
            Service::Iam,
            "CreateRole",
            &[
                ("RoleName", "wasm-ccm-irsa"),
                ("AssumeRolePolicyDocument", TRUST_WEB_IDENTITY),
            ],
        )
        .await;
        moto.call(
            Service::Iam,
            "PutRolePolicy",
            &[
                ("RoleName", "wasm-ccm-irsa"),
                ("PolicyName", "ccm"),
                ("PolicyDocument", ALLOW_CCM),
            ],
        )
        .await;
        moto.keys = admin.clone();
        let cluster_tag = format!("kubernetes.io/cluster/{cluster_id}");
        let vpc = text(
            &moto
                .call(Service::Ec2, "CreateVpc", &[("CidrBlock", "10.0.0.0/16")])
                .await,
            "vpcId",
        );
        let mut subnets = Vec::new();
        for (cidr, zone) in [
            ("10.0.0.0/20", "us-east-1a"),
            ("10.0.16.0/20", "us-east-1b"),
        ] {
            let subnet = text(
                &moto
                    .call(
                        Service::Ec2,
                        "CreateSubnet",
                        &[
                            ("VpcId", &vpc),
                            ("CidrBlock", cidr),
                            ("AvailabilityZone", zone),
                        ],
                    )
                    .await,
                "subnetId",
            );
            tag(
                moto,
                &subnet,
                &[(&cluster_tag, "owned"), ("kubernetes.io/role/elb", "1")],
            )
            .await;
            subnets.push(subnet);
        }
        let node_security_group = security_group(moto, &vpc, "nodes", "the cluster's nodes").await;
        tag(moto, &node_security_group, &[(&cluster_tag, "owned")]).await;
        // A rule of the user's, which no load balancer may touch.
        moto.call(
            Service::Ec2,
            "AuthorizeSecurityGroupIngress",
            &[
                ("GroupId", &node_security_group),
                ("IpPermissions.1.IpProtocol", "tcp"),
                ("IpPermissions.1.FromPort", "22"),
                ("IpPermissions.1.ToPort", "22"),
                ("IpPermissions.1.IpRanges.1.CidrIp", "10.0.0.0/16"),
                ("IpPermissions.1.IpRanges.1.Description", "ssh"),
            ],
        )
        .await;
        let gateway = text(
            &moto.call(Service::Ec2, "CreateInternetGateway", &[]).await,
            "internetGatewayId",
        );
        moto.call(
            Service::Ec2,
            "AttachInternetGateway",
            &[("InternetGatewayId", &gateway), ("VpcId", &vpc)],
        )
        .await;
        let route_table = text(
            &moto
                .call(Service::Ec2, "CreateRouteTable", &[("VpcId", &vpc)])
                .await,
            "routeTableId",
        );
        tag(moto, &route_table, &[(&cluster_tag, "owned")]).await;
        moto.call(
            Service::Ec2,
            "CreateRoute",
            &[
                ("RouteTableId", &route_table),
                ("DestinationCidrBlock", "0.0.0.0/0"),
                ("GatewayId", &gateway),
            ],
        )
        .await;
        for subnet in &subnets {
            moto.call(
                Service::Ec2,
                "AssociateRouteTable",
                &[("RouteTableId", &route_table), ("SubnetId", subnet)],
            )
            .await;
        }
        Self {
            cluster_id: cluster_id.into(),
            vpc,
            subnets,
            subnet_cidrs: vec!["10.0.0.0/20".into(), "10.0.16.0/20".into()],
            route_table,
            node_security_group,
            admin,
            provider,
            role_arn: format!("arn:aws:iam::{ACCOUNT}:role/wasm-ccm-irsa"),
        }
    }

    /// A security group of the user's in the world's VPC; its ID.
    pub async fn security_group(&self, moto: &Moto, name: &str, description: &str) -> String {
        security_group(moto, &self.vpc, name, description).await
    }

    /// The rules the world gives the nodes' security group (the user's SSH rule).
    pub fn node_rules_at_start(&self) -> Vec<IngressRule> {
        vec![IngressRule {
            protocol: "tcp".into(),
            from: "22".into(),
            to: "22".into(),
            source: "10.0.0.0/16".into(),
            description: "ssh".into(),
        }]
    }

    /// Launches an `m5.large` tagged for the cluster in subnet `index`, in the nodes'
    /// security group.
    pub async fn launch(&self, moto: &Moto, index: usize) -> LaunchedInstance {
        self.launch_typed(moto, index, "m5.large").await
    }

    /// [`World::launch`] with an instance type of the caller's choosing (e.g.
    /// `p4d.24xlarge`, which the emulator gives an instance topology).
    pub async fn launch_typed(
        &self,
        moto: &Moto,
        index: usize,
        instance_type: &str,
    ) -> LaunchedInstance {
        let answer = moto
            .call(
                Service::Ec2,
                "RunInstances",
                &[
                    ("ImageId", "ami-12c6146b"),
                    ("MinCount", "1"),
                    ("MaxCount", "1"),
                    ("InstanceType", instance_type),
                    ("SubnetId", &self.subnets[index]),
                    ("SecurityGroupId.1", &self.node_security_group),
                    ("TagSpecification.1.ResourceType", "instance"),
                    (
                        "TagSpecification.1.Tag.1.Key",
                        &format!("kubernetes.io/cluster/{}", self.cluster_id),
                    ),
                    ("TagSpecification.1.Tag.1.Value", "owned"),
                ],
            )
            .await;
        LaunchedInstance {
            id: text(&answer, "instanceId"),
            zone: text(&answer, "availabilityZone"),
            private_dns_name: text(&answer, "privateDnsName"),
            private_ip: text(&answer, "privateIpAddress"),
        }
    }
}

async fn user(moto: &Moto, name: &str, policy: &str) -> Keys {
    moto.call(Service::Iam, "CreateUser", &[("UserName", name)])
        .await;
    moto.call(
        Service::Iam,
        "PutUserPolicy",
        &[
            ("UserName", name),
            ("PolicyName", "policy"),
            ("PolicyDocument", policy),
        ],
    )
    .await;
    let answer = moto
        .call(Service::Iam, "CreateAccessKey", &[("UserName", name)])
        .await;
    Keys {
        id: text(&answer, "AccessKeyId"),
        secret: text(&answer, "SecretAccessKey"),
        session_token: None,
    }
}

/// A security group `name` in `vpc`; its ID.
async fn security_group(moto: &Moto, vpc: &str, name: &str, description: &str) -> String {
    let answer = moto
        .call(
            Service::Ec2,
            "CreateSecurityGroup",
            &[
                ("GroupName", name),
                ("GroupDescription", description),
                ("VpcId", vpc),
            ],
        )
        .await;
    text(&answer, "groupId")
}

async fn tag(moto: &Moto, resource: &str, tags: &[(&str, &str)]) {
    let mut params = vec![("ResourceId.1".to_owned(), resource.to_owned())];
    for (i, (k, v)) in tags.iter().enumerate() {
        params.push((format!("Tag.{}.Key", i + 1), (*k).to_owned()));
        params.push((format!("Tag.{}.Value", i + 1), (*v).to_owned()));
    }
    let params: Vec<(&str, &str)> = params
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    moto.call(Service::Ec2, "CreateTags", &params).await;
}

impl World {
    /// The AWS provider's cloud config for this world: EC2 and both load balancing APIs
    /// at 127.0.0.1 (one moto serves every service; the provider names the service of
    /// each request and the host signs for it because the rule's `services` lists it),
    /// each named by the SDK service ID cloud-provider-aws matches, so the same file
    /// serves upstream.
    pub fn cloud_config(&self, moto: &Moto) -> String {
        let port = moto.port;
        let mut config = format!(
            "[Global]\nZone = us-east-1a\nVPC = {vpc}\nKubernetesClusterID = {cluster}\n",
            vpc = self.vpc,
            cluster = self.cluster_id,
        );
        for (i, service) in ["EC2", "Elastic Load Balancing", "Elastic Load Balancing v2"]
            .iter()
            .enumerate()
        {
            config.push_str(&format!(
                "\n[ServiceOverride \"{n}\"]\nService = {service}\nRegion = {REGION}\n\
                 URL = http://127.0.0.1:{port}\nSigningRegion = {REGION}\n",
                n = i + 1
            ));
        }
        config
    }

    /// The AWS provider's policy for this world; `keys` is the YAML of the `aws`
    /// rule's key source, e.g. `accessKeyIdFile: id, secretAccessKeyFile: secret`.
    pub fn policy(moto: &Moto, keys: &str) -> String {
        let port = moto.port;
        let actions = provider_actions().join(", ");
        format!(
            "allowedOutboundHosts:\n  - http://127.0.0.1:{port}\n\
             credentials:\n\
             \x20 - destination: http://127.0.0.1:{port}\n    aws: {{region: {REGION}, services: [ec2, elasticloadbalancing], {keys}}}\n\
             \x20   allowedActions: [{actions}]\n\
             limits:\n  callTimeout: 30s\n  poolSize: 2\n"
        )
    }
}

/// Installs the process's rustls crypto provider (ring) if none is yet: reqwest's
/// clients need one.
pub fn ensure_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}
