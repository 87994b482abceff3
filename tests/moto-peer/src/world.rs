//! The [`World`] the AWS provider runs in: a VPC with subnets, a route table, the
//! nodes' security group, IAM users and a role; instances launched in it; and the
//! provider's cloud config and policy for it.

use crate::{ACCOUNT, IngressRule, Keys, Moto, REGION, Service, text};

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
