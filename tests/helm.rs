//! The Helm chart `deploy/helm/wasm-ccm`: it lints with each values file, and renders
//! the objects deploy/'s kustomize directories render (only Helm's own labels added),
//! so the two installation paths cannot drift apart. Installed on a real API server,
//! its RBAC serves a full run: tests/real_apiserver.rs.

use std::path::Path;

use serde_json::Value;
use wasm_ccm_tests::fixtures::kustomize;
use wasm_ccm_tests::helm::{HELM_LABELS, chart, comparable, differences, objects, run, template};

fn deploy(dir: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy")
        .join(dir)
}

fn values(file: &str) -> String {
    chart().join(file).display().to_string()
}

/// What `kubectl kustomize` renders for `dirs`, without the objects named `left_out`
/// (`Kind/name`: what the values file says the operator makes).
fn kustomized(dirs: &[&str], left_out: &[&str]) -> Vec<Value> {
    let objects = dirs
        .iter()
        .flat_map(|dir| kustomize(&deploy(dir)))
        .filter(|o| {
            let id = format!(
                "{}/{}",
                o["kind"].as_str().unwrap_or_default(),
                o["metadata"]["name"].as_str().unwrap_or_default()
            );
            !left_out.contains(&id.as_str())
        })
        .collect();
    comparable(objects)
}

/// Every rendered object differs from the other side's by name, or compares whole.
fn assert_same(what: &str, chart: Vec<Value>, kustomized: Vec<Value>) {
    let ids = |objects: &[Value]| -> Vec<String> {
        objects
            .iter()
            .map(|o| format!("{}/{}", o["kind"], o["metadata"]["name"]))
            .collect()
    };
    assert_eq!(
        ids(&chart),
        ids(&kustomized),
        "{what}: the objects rendered"
    );
    for (ours, theirs) in chart.iter().zip(&kustomized) {
        let differences = differences(ours, theirs);
        assert!(
            differences.is_empty(),
            "{what}: {} {} differs from deploy/'s (chart != kustomize):\n{}",
            ours["kind"],
            ours["metadata"]["name"],
            differences.join("\n")
        );
    }
}

#[test]
fn the_chart_lints_with_each_values_file() {
    let chart = chart().display().to_string();
    for file in [None, Some("values-aws.yaml"), Some("values-openstack.yaml")] {
        let mut args = vec!["lint", "--strict", chart.as_str()];
        let file = file.map(values);
        if let Some(file) = &file {
            args.extend(["-f", file]);
        }
        let out = run(&args);
        assert!(out.contains("0 chart(s) failed"), "{out}");
    }
}

/// What is rendered, with which helm arguments, against which deploy/ directories,
/// without which objects.
type Case<'a> = (&'a str, Vec<String>, &'a [&'a str], &'a [&'a str]);

/// The reference provider (the defaults), with the monitoring objects, and the AWS and
/// OpenStack values files: the same objects as deploy/, deploy/ with deploy/monitoring,
/// deploy/aws/ and deploy/openstack/, but for the ConfigMaps the values files tell the
/// operator to make from those directories (the chart mounts them by name).
#[test]
fn the_chart_renders_what_deploy_renders() {
    assert!(
        deploy("providers/simcloud.wasm").exists(),
        "deploy/providers/simcloud.wasm is missing: run scripts/build-guests.sh"
    );
    let made_by_the_operator = [
        "ConfigMap/wasm-ccm-providers",
        "ConfigMap/wasm-ccm-cloud-config",
    ];
    let cases: [Case; 4] = [
        ("defaults", vec![], &["."], &[]),
        (
            "with monitoring",
            vec!["--set".into(), "monitoring.enabled=true".into()],
            &[".", "monitoring"],
            &[],
        ),
        (
            "values-aws.yaml",
            vec!["-f".into(), values("values-aws.yaml")],
            &["aws"],
            &made_by_the_operator,
        ),
        (
            "values-openstack.yaml",
            vec!["-f".into(), values("values-openstack.yaml")],
            &["openstack"],
            &made_by_the_operator,
        ),
    ];
    for (what, args, dirs, left_out) in cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let rendered = objects(&template(&args));
        // Every object carries Helm's labels beside deploy/'s.
        for object in &rendered {
            for label in HELM_LABELS
                .iter()
                .chain(&["app.kubernetes.io/name", "app.kubernetes.io/part-of"])
            {
                assert!(
                    object["metadata"]["labels"][label].is_string(),
                    "{what}: {} {} has no label {label}",
                    object["kind"],
                    object["metadata"]["name"]
                );
            }
        }
        assert_same(what, comparable(rendered), kustomized(dirs, left_out));
    }
}

/// Values that would break a cluster: a single replica gets no disruption budget (one
/// of `minAvailable: 1` would block every drain), a web-identity token without an
/// audience is refused (it would be a token for the API server), and extra flags come
/// after the chart's, quoted, so one overrides the chart's (the last value wins).
#[test]
fn values_that_would_break_a_cluster_are_refused_or_left_out() {
    let kinds = |args: &[&str]| -> Vec<String> {
        objects(&template(args))
            .iter()
            .map(|o| o["kind"].as_str().unwrap_or_default().to_owned())
            .collect()
    };
    assert!(kinds(&[]).contains(&"PodDisruptionBudget".to_owned()));
    assert!(!kinds(&["--set", "replicas=1"]).contains(&"PodDisruptionBudget".to_owned()));

    let chart = chart().display().to_string();
    let refused = wasm_ccm_tests::helm::try_run(&[
        "template",
        "wasm-ccm",
        &chart,
        "--set",
        "credentials.webIdentityToken.path=aws/token",
    ])
    .expect_err("a token without an audience");
    assert!(
        refused.contains("credentials.webIdentityToken.audience is required"),
        "{refused}"
    );

    let rendered = objects(&template(&["--set", "extraArgs={--leader-elect=false}"]));
    let deployment = rendered
        .iter()
        .find(|o| o["kind"] == "Deployment")
        .expect("the Deployment");
    let args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .expect("args");
    assert_eq!(
        args.last().and_then(|a| a.as_str()),
        Some("--leader-elect=false")
    );
}
