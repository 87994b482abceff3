//! The playground's AWS: moto on 127.0.0.1 and the AWS provider.

use std::path::Path;

use crate::cluster::Cluster;

use crate::kubelets::{Instances, Kubelets};
use crate::seeding::{Options, PlaygroundError, Seeded, kubelet_node, web_service, write};

/// moto on 127.0.0.1 with a VPC, one EC2 instance per node (nodes named by their
/// private DNS names, as on AWS), request authentication on, and the AWS provider's
/// files: its policy signs with an IAM user's keys from the credentials directory.
pub(crate) async fn seed(
    cluster: &Cluster,
    options: &Options,
    providers: &Path,
) -> Result<Seeded, PlaygroundError> {
    let mut moto = moto_peer::Moto::try_start()
        .await
        .map_err(PlaygroundError::Emulator)?;
    let world = moto_peer::World::create(&mut moto, "playground").await;
    let mut instances = Vec::new();
    for i in 1..=options.nodes {
        let instance = world.launch(&moto, (i + 1) % 2).await;
        cluster
            .create_node(kubelet_node(
                &instance.private_dns_name,
                &format!("10.244.{i}.0/24"),
            ))
            .await?;
        instances.push(instance);
    }
    cluster.create_service("default", web_service()).await?;
    let credentials = options.work_dir.join("credentials");
    write(&credentials.join("aws/access-key-id"), &world.provider.id)?;
    write(
        &credentials.join("aws/secret-access-key"),
        &world.provider.secret,
    )?;
    write(
        &providers.join("aws.yaml"),
        moto_peer::World::policy(
            &moto,
            "accessKeyIdFile: ../credentials/aws/access-key-id, secretAccessKeyFile: ../credentials/aws/secret-access-key",
        ),
    )?;
    let cloud_config = options.work_dir.join("cloud.conf");
    write(&cloud_config, world.cloud_config(&moto))?;
    // From here on, every request must carry a valid signature (the host's).
    moto.enable_auth(0).await;
    let url = moto.url();
    // The Python next to moto's server has boto3 (moto depends on it).
    let python = moto_peer::Moto::program().with_file_name("python");
    let ec2 = |action: &str, instance: &str| {
        format!(
            "{} -c \"import boto3; boto3.client('ec2', endpoint_url='{url}', region_name='{}', aws_access_key_id='{}', aws_secret_access_key='{}').{action}(InstanceIds=['{instance}'])\"",
            python.display(),
            moto_peer::REGION,
            world.admin.id,
            world.admin.secret
        )
    };
    let mut try_lines = Vec::new();
    if let Some(first) = instances.first() {
        try_lines.push(ec2("stop_instances", &first.id));
    }
    if let Some(second) = instances.get(1) {
        try_lines.push(ec2("terminate_instances", &second.id));
    }
    let moto = std::sync::Arc::new(moto);
    let kubelets = Kubelets::start(
        cluster.nodes(),
        Instances::Moto(moto.clone()),
        options.node_monitor_grace_period,
    );
    try_lines.push(kubelets.note());
    Ok(Seeded {
        cloud_config,
        demo_node: instances
            .first()
            .map(|i| i.private_dns_name.clone())
            .unwrap_or_default(),
        demo_annotations: Vec::new(),
        flags: Vec::new(),
        about: vec![
            format!(
                "AWS emulator (moto):      {url}  (VPC {}, request authentication on)",
                world.vpc
            ),
            format!(
                "admin keys:               {} / {}",
                world.admin.id, world.admin.secret
            ),
        ],
        try_lines,
        _cloud: Box::new((moto, kubelets)),
    })
}
