//! The AWS provider against scripted EC2 endpoints on 127.0.0.1, for what moto cannot
//! produce: pages, throttling, `DescribeInstanceTopology` answers of every shape.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::*;
use wasm_ccm_tests::{RawBehavior, RawServer};

/// A provider loaded with its policy and a cloud config sending EC2 calls to `url`,
/// signed with key `AKIAPAGES`.
async fn scripted_provider(url: &str) -> (TempDir, wasm_ccm_host::provider::Provider) {
    scripted_provider_with(url, "").await
}

/// [`scripted_provider`] with `global` lines added to the cloud config's `[Global]`.
async fn scripted_provider_with(
    url: &str,
    global: &str,
) -> (TempDir, wasm_ccm_host::provider::Provider) {
    let dir = TempDir::new("aws-scripted");
    std::fs::copy(guest("aws_provider"), dir.path().join("aws.wasm")).unwrap();
    std::fs::write(dir.path().join("id"), "AKIAPAGES").unwrap();
    std::fs::write(dir.path().join("secret"), "pages-secret").unwrap();
    std::fs::write(
        dir.path().join("aws.yaml"),
        format!(
            "allowedOutboundHosts: ['{url}']\ncredentials:\n  - destination: '{url}'\n    aws: {{region: us-east-1, service: ec2, accessKeyIdFile: id, secretAccessKeyFile: secret}}\n"
        ),
    )
    .unwrap();
    let config = format!(
        "[Global]\nRegion = us-east-1\n{global}[ServiceOverride \"1\"]\nService = EC2\nRegion = us-east-1\nURL = {url}\nSigningRegion = us-east-1\n"
    );
    let provider = wasm_ccm_tests::loader()
        .load(&dir.path().join("aws.wasm"), config.into_bytes())
        .await
        .unwrap();
    (dir, provider)
}

/// An EC2 error answer.
fn ec2_error(code: &str) -> String {
    format!(
        "<Response><Errors><Error><Code>{code}</Code><Message>scripted</Message></Error></Errors><RequestID>1</RequestID></Response>"
    )
}

/// An instance of `DescribeInstances`, in us-east-1b.
fn instance_xml(id: &str, instance_type: &str, dns: &str) -> String {
    format!(
        "<item><instancesSet><item><instanceId>{id}</instanceId>\
        <instanceType>{instance_type}</instanceType><placement><availabilityZone>us-east-1b</availabilityZone></placement>\
        <instanceState><name>running</name></instanceState><privateDnsName>{dns}</privateDnsName>\
        <networkInterfaceSet><item><status>in-use</status><attachment><deviceIndex>0</deviceIndex></attachment>\
        <privateIpAddressesSet><item><privateIpAddress>10.0.9.9</privateIpAddress></item></privateIpAddressesSet></item></networkInterfaceSet>\
        </item></instancesSet></item>"
    )
}

/// A fake EC2 endpoint on 127.0.0.1 (moto cannot throttle): long lists come in pages,
/// and lookups by instance ID are throttled.
#[tokio::test]
async fn pagination_and_throttling_against_a_scripted_ec2() {
    use wasm_ccm_host::provider::{CloudError, ProviderError};

    let instance = instance_xml("i-0page2", "c6i.xlarge", "ip-10-0-9-9.ec2.internal");
    let unsigned = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = unsigned.clone();
    let ec2 = RawServer::start(RawBehavior::Respond(std::sync::Arc::new(move |request: &str| {
        if !request.contains("authorization: AWS4-HMAC-SHA256 Credential=AKIAPAGES/") {
            counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
        let body = request.split("\r\n\r\n").nth(1).unwrap_or_default();
        if body.contains("Action=DescribeInstances") && body.contains("InstanceId.1=") {
            return (503, ec2_error("RequestLimitExceeded"));
        }
        if body.contains("Action=DescribeInstances") && !body.contains("NextToken=") {
            return (200, "<DescribeInstancesResponse><reservationSet/><nextToken>page-2</nextToken></DescribeInstancesResponse>".into());
        }
        if body.contains("Action=DescribeInstances") && body.contains("NextToken=page-2") {
            return (200, format!("<DescribeInstancesResponse><reservationSet>{instance}</reservationSet></DescribeInstancesResponse>"));
        }
        (400, ec2_error("UnsupportedOperation"))
    })))
    .await;
    let (_dir, provider) = scripted_provider(&ec2.url()).await;
    let v2 = provider.instances_v2().expect("instances-v2");

    // By node name: the instance is on the second page.
    let info = v2
        .instance_metadata(&wasm_ccm_tests::node("ip-10-0-9-9.ec2.internal", None, &[]))
        .await
        .unwrap();
    assert_eq!(info.provider_id, "aws:///us-east-1b/i-0page2");
    assert_eq!(info.instance_type, "c6i.xlarge");
    assert_eq!(info.region, "us-east-1");

    // By provider ID: throttled, which the controllers retry after the delay.
    let err = v2
        .instance_exists(&wasm_ccm_tests::node(
            "n",
            Some("aws:///us-east-1b/i-0page2"),
            &[],
        ))
        .await
        .unwrap_err();
    match err {
        ProviderError::Cloud {
            error: CloudError::RetryAfter { delay, message },
            ..
        } => {
            assert_eq!(delay, Duration::from_secs(5));
            assert!(message.contains("RequestLimitExceeded"), "{message}");
        }
        other => panic!("expected retry-after, got {other:?}"),
    }
    assert_eq!(
        unsigned.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "every request is signed"
    );
}

/// A lookup by instance IDs follows `NextToken`, as upstream's does whatever it asked:
/// EC2 may page it (moto does at 100 reservations). Every route of a table whose
/// instances come back in two pages is listed with its Node; none is skipped as
/// routing to an unknown instance (which the route controller would make again every
/// pass).
#[tokio::test]
async fn routes_whose_instances_come_in_pages_are_all_listed() {
    let first = instance_xml("i-0a", "m5.large", "ip-10-0-9-1.ec2.internal");
    let second = instance_xml("i-0b", "m5.large", "ip-10-0-9-2.ec2.internal");
    let route = |cidr: &str, id: &str| {
        format!(
            "<item><destinationCidrBlock>{cidr}</destinationCidrBlock><instanceId>{id}</instanceId><state>active</state></item>"
        )
    };
    let table = format!(
        "<DescribeRouteTablesResponse><routeTableSet><item><routeTableId>rtb-1</routeTableId><routeSet>{}{}</routeSet></item></routeTableSet></DescribeRouteTablesResponse>",
        route("100.64.1.0/24", "i-0a"),
        route("100.64.2.0/24", "i-0b")
    );
    let ec2 = RawServer::start(RawBehavior::Respond(Arc::new(move |request: &str| {
        let body = request.split("\r\n\r\n").nth(1).unwrap_or_default();
        if body.contains("Action=DescribeRouteTables") {
            return (200, table.clone());
        }
        if body.contains("Action=DescribeInstances") && body.contains("InstanceId.1=") {
            return if body.contains("NextToken=page-2") {
                (200, format!("<DescribeInstancesResponse><reservationSet>{second}</reservationSet></DescribeInstancesResponse>"))
            } else {
                (200, format!("<DescribeInstancesResponse><reservationSet>{first}</reservationSet><nextToken>page-2</nextToken></DescribeInstancesResponse>"))
            };
        }
        (400, ec2_error("UnsupportedOperation"))
    })))
    .await;
    let (_dir, provider) = scripted_provider_with(&ec2.url(), "RouteTableID = rtb-1\n").await;
    let routes = provider.routes().expect("routes exported");
    let mut listed: Vec<(String, String)> = routes
        .list_routes("kubernetes")
        .await
        .unwrap()
        .into_iter()
        .map(|r| (r.destination_cidr, r.target_node))
        .collect();
    listed.sort();
    assert_eq!(
        listed,
        [
            ("100.64.1.0/24".into(), "ip-10-0-9-1.ec2.internal".into()),
            ("100.64.2.0/24".into(), "ip-10-0-9-2.ec2.internal".into()),
        ]
    );
}

/// Network node labels as upstream sets them from `DescribeInstanceTopology` (moto
/// serves it only through the test shim, where the oracle compares it): three layers
/// for a `trn1` instance, top first, with the zone ID; an `m5` without topology gets
/// none and is not asked about again (the answer is kept in the shared cache); a node
/// labelled already is not asked about at all. A node named by its instance's resource
/// name is found by it.
#[tokio::test]
async fn network_node_labels_from_describe_instance_topology() {
    let topology_calls = Arc::new(AtomicUsize::new(0));
    let calls = topology_calls.clone();
    let ec2 = RawServer::start(RawBehavior::Respond(Arc::new(move |request: &str| {
        let body = request.split("\r\n\r\n").nth(1).unwrap_or_default();
        let trn = body.contains("ip-10-0-9-9") || body.contains("i-0trn");
        if body.contains("Action=DescribeInstances&") {
            let instance = if trn {
                instance_xml("i-0trn", "trn1.32xlarge", "ip-10-0-9-9.ec2.internal")
            } else {
                instance_xml("i-0m5", "m5.large", "ip-10-0-9-8.ec2.internal")
            };
            return (200, format!("<DescribeInstancesResponse><reservationSet>{instance}</reservationSet></DescribeInstancesResponse>"));
        }
        if body.contains("Action=DescribeAvailabilityZones") {
            return (200, "<DescribeAvailabilityZonesResponse><availabilityZoneInfo><item><zoneName>us-east-1b</zoneName>\
                <zoneId>use1-az2</zoneId><zoneType>availability-zone</zoneType></item></availabilityZoneInfo></DescribeAvailabilityZonesResponse>".into());
        }
        if body.contains("Action=DescribeInstanceTopology") {
            calls.fetch_add(1, Ordering::SeqCst);
            let set = if trn {
                "<item><instanceId>i-0trn</instanceId><instanceType>trn1.32xlarge</instanceType>\
                 <networkNodeSet><item>nn-1</item><item>nn-2</item><item>nn-3</item></networkNodeSet>\
                 <availabilityZone>us-east-1b</availabilityZone><zoneId>use1-az2</zoneId></item>"
            } else {
                ""
            };
            return (200, format!("<DescribeInstanceTopologyResponse><instanceSet>{set}</instanceSet></DescribeInstanceTopologyResponse>"));
        }
        (400, ec2_error("UnsupportedOperation"))
    })))
    .await;
    let (_dir, provider) = scripted_provider(&ec2.url()).await;
    let v2 = provider.instances_v2().expect("instances-v2");
    let trn = v2
        .instance_metadata(&wasm_ccm_tests::node("ip-10-0-9-9.ec2.internal", None, &[]))
        .await
        .unwrap();
    let labels: std::collections::BTreeMap<String, String> =
        trn.additional_labels.into_iter().collect();
    assert_eq!(
        labels,
        [
            ("topology.k8s.aws/network-node-layer-1", "nn-1"),
            ("topology.k8s.aws/network-node-layer-2", "nn-2"),
            ("topology.k8s.aws/network-node-layer-3", "nn-3"),
            ("topology.k8s.aws/zone-id", "use1-az2"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
    );
    assert_eq!(topology_calls.load(Ordering::SeqCst), 1);
    for _ in 0..2 {
        let m5 = v2
            .instance_metadata(&wasm_ccm_tests::node("ip-10-0-9-8.ec2.internal", None, &[]))
            .await
            .unwrap();
        assert!(
            !m5.additional_labels
                .iter()
                .any(|(k, _)| k.starts_with("topology.k8s.aws/network-node-layer-")),
            "{:?}",
            m5.additional_labels
        );
    }
    assert_eq!(
        topology_calls.load(Ordering::SeqCst),
        2,
        "m5.large asked once"
    );
    let mut labelled = wasm_ccm_tests::node("ip-10-0-9-9.ec2.internal", None, &[]);
    labelled.metadata.labels = vec![(
        "topology.k8s.aws/network-node-layer-1".into(),
        "nn-1".into(),
    )];
    v2.instance_metadata(&labelled).await.unwrap();
    assert_eq!(
        topology_calls.load(Ordering::SeqCst),
        2,
        "labelled: not asked"
    );
}
