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

/// `provider.oci` and `provider.trustedKeys` render what the controller manager reads:
/// a `NAME.source.yaml` it parses, with the keys given, beside the policy (and no
/// component), and the trusted keys mounted where `--provider-trusted-keys` points.
#[test]
fn the_oci_values_render_a_source_and_trusted_keys_the_controller_manager_reads() {
    use wasm_ccm_host::policy::signing::{TrustedKey, read_trusted_keys};
    use wasm_ccm_host::provider::oci::SourceSpec;
    let dir = wasm_ccm_tests::TempDir::new("helm-oci");
    let key = rcgen::KeyPair::generate().unwrap().public_key_pem();
    let operator = rcgen::KeyPair::generate().unwrap().public_key_pem();
    std::fs::write(dir.path().join("release.pub"), &key).unwrap();
    std::fs::write(dir.path().join("operator.pub"), &operator).unwrap();
    let reference = "oci://registry.example.com/providers/simcloud@sha256:\
                     0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    let key_arg = format!(
        "provider.oci.keys[0]={}",
        dir.path().join("release.pub").display()
    );
    let operator_arg = format!(
        "provider.trustedKeys[0]={}",
        dir.path().join("operator.pub").display()
    );
    let rendered = objects(&template(&[
        "--set",
        &format!("provider.oci.reference={reference}"),
        "--set",
        "provider.oci.credentialsFile=registry/.dockerconfigjson",
        "--set-file",
        &key_arg,
        "--set-file",
        &operator_arg,
    ]));
    let config_map = |name: &str| {
        rendered
            .iter()
            .find(|o| o["kind"] == "ConfigMap" && o["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("ConfigMap {name}"))
            .clone()
    };
    let providers = config_map("wasm-ccm-providers");
    assert!(
        providers.get("binaryData").is_none(),
        "no component: {providers}"
    );
    assert!(
        providers["data"]["simcloud.yaml"].is_string(),
        "the policy stays"
    );
    let text = providers["data"]["simcloud.source.yaml"]
        .as_str()
        .expect("the source");
    let spec = SourceSpec::parse(text, Path::new("simcloud.source.yaml")).expect(text);
    assert_eq!(format!("oci://{}", spec.display_reference()), reference);
    assert_eq!(
        spec.credentials_file.as_deref(),
        Some(Path::new("registry/.dockerconfigjson"))
    );
    assert_eq!(spec.keys, vec![TrustedKey::parse(&key).unwrap()]);

    let trusted = config_map("wasm-ccm-trusted-keys");
    let mounted = dir.path().join("trusted-keys");
    std::fs::create_dir(&mounted).unwrap();
    for (file, pem) in trusted["data"].as_object().unwrap() {
        std::fs::write(mounted.join(file), pem.as_str().unwrap()).unwrap();
    }
    assert_eq!(
        read_trusted_keys(&mounted).unwrap(),
        vec![TrustedKey::parse(&operator).unwrap()]
    );
    let deployment = rendered.iter().find(|o| o["kind"] == "Deployment").unwrap();
    let pod = &deployment["spec"]["template"]["spec"];
    let args = pod["containers"][0]["args"].as_array().unwrap();
    assert!(
        args.iter()
            .any(|a| a == "--provider-trusted-keys=/etc/wasm-ccm/trusted-keys")
    );
    assert!(
        pod["containers"][0]["volumeMounts"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["mountPath"] == "/etc/wasm-ccm/trusted-keys")
    );
}
