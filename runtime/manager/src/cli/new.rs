//! `wasm-ccm new NAME [DIR]`: writes a provider crate that builds as generated
//! (`cargo build --target wasm32-wasip2`, or `cargo component build`), passes
//! `wasm-ccm check`, and has a unit test against a mock cloud.
//!
//! What it writes: `Cargo.toml` (depending on the SDK, `wasm-ccm-guest`), `src/lib.rs`
//! (the provider), `contract/world.wit` (the exports chosen) with the contract in
//! `contract/deps/` (from the SDK; not `wit/`, which `cargo component` would take as
//! its own target and fail to resolve with its older WIT parser),
//! `policy.yaml`, `cloud-config.json`, `README.md` and `.gitignore`. Templates are in
//! `runtime/manager/templates/provider/`.

use std::path::{Path, PathBuf};

/// The contract's WIT files, as the SDK carries them: (path under `contract/`, text).
const WIT: &[(&str, &str)] = &[
    (
        "deps/wasm-ccm-provider/provider.wit",
        include_str!("../../../../guests/sdk/wit/provider.wit"),
    ),
    (
        "deps/wasm-ccm-provider/types.wit",
        include_str!("../../../../guests/sdk/wit/types.wit"),
    ),
    (
        "deps/cli.wit",
        include_str!("../../../../guests/sdk/wit/deps/cli.wit"),
    ),
    (
        "deps/clocks.wit",
        include_str!("../../../../guests/sdk/wit/deps/clocks.wit"),
    ),
    (
        "deps/filesystem.wit",
        include_str!("../../../../guests/sdk/wit/deps/filesystem.wit"),
    ),
    (
        "deps/http.wit",
        include_str!("../../../../guests/sdk/wit/deps/http.wit"),
    ),
    (
        "deps/io.wit",
        include_str!("../../../../guests/sdk/wit/deps/io.wit"),
    ),
    (
        "deps/random.wit",
        include_str!("../../../../guests/sdk/wit/deps/random.wit"),
    ),
    (
        "deps/sockets.wit",
        include_str!("../../../../guests/sdk/wit/deps/sockets.wit"),
    ),
];

const CARGO_TOML: &str = include_str!("../../templates/provider/Cargo.toml.tmpl");
const LIB_RS: &str = include_str!("../../templates/provider/lib.rs.tmpl");
const WORLD: &str = include_str!("../../templates/provider/world.wit.tmpl");
const POLICY: &str = include_str!("../../templates/provider/policy.yaml.tmpl");
const CLOUD_CONFIG: &str = include_str!("../../templates/provider/cloud-config.json.tmpl");
const README: &str = include_str!("../../templates/provider/README.md.tmpl");
const GITIGNORE: &str = include_str!("../../templates/provider/gitignore.tmpl");

/// An interface `wasm-ccm new` can generate, with its code.
struct Export {
    /// The WIT name, as given to `--exports`.
    wit: &'static str,
    /// The `export_provider!` name.
    macro_name: &'static str,
    /// What `src/lib.rs` imports for it.
    imports: &'static [&'static str],
    /// The implementation.
    code: &'static str,
    /// What the tests import for it, and the tests.
    test_imports: &'static [&'static str],
    tests: &'static str,
}

const EXPORTS: &[Export] = &[
    Export {
        wit: "instances-v2",
        macro_name: "instances_v2",
        imports: &[
            "wasm_ccm_guest::InstancesV2",
            "wasm_ccm_guest::http::Request",
            "wasm_ccm_guest::types::{CloudError, InstanceInfo, Node, NodeAddress, NodeAddressType}",
            "wasm_ccm_guest::url::encode_component",
            "wasm_ccm_guest::{cloud_error, provider_id}",
        ],
        code: include_str!("../../templates/provider/instances_v2.rs.tmpl"),
        test_imports: &[
            "wasm_ccm_guest::http::Response",
            "wasm_ccm_guest::testing::MockTransport",
            "wasm_ccm_guest::types::{ObjectMeta, Retry}",
        ],
        tests: include_str!("../../templates/provider/instances_v2_tests.rs.tmpl"),
    },
    Export {
        wit: "instances-batch",
        macro_name: "instances_batch",
        imports: &["wasm_ccm_guest::InstancesBatch"],
        code: include_str!("../../templates/provider/instances_batch.rs.tmpl"),
        test_imports: &[],
        tests: "",
    },
    Export {
        wit: "load-balancer",
        macro_name: "load_balancer",
        imports: &[
            "wasm_ccm_guest::LoadBalancer",
            "wasm_ccm_guest::types::{CloudError, LoadBalancerStatus, Node, Service}",
        ],
        code: include_str!("../../templates/provider/load_balancer.rs.tmpl"),
        test_imports: &[],
        tests: "",
    },
    Export {
        wit: "routes",
        macro_name: "routes",
        imports: &[
            "wasm_ccm_guest::Routes",
            "wasm_ccm_guest::types::{CloudError, Route}",
        ],
        code: include_str!("../../templates/provider/routes.rs.tmpl"),
        test_imports: &[],
        tests: "",
    },
    Export {
        wit: "clusters",
        macro_name: "clusters",
        imports: &[
            "wasm_ccm_guest::Clusters",
            "wasm_ccm_guest::types::CloudError",
        ],
        code: include_str!("../../templates/provider/clusters.rs.tmpl"),
        test_imports: &[],
        tests: "",
    },
];

/// The exports generated when none are chosen.
pub const DEFAULT_EXPORTS: &str = "instances-v2,instances-batch";

/// Where the SDK comes from in the generated `Cargo.toml`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sdk {
    /// A path to `guests/sdk` (a checkout of wasm-ccm).
    Path(PathBuf),
    /// A crates.io version requirement.
    Version(String),
}

impl Sdk {
    /// The SDK of the checkout this binary was built from, when it is still there;
    /// else the SDK's release from crates.io.
    pub fn default_for_this_build() -> Sdk {
        let checkout = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../guests/sdk");
        match checkout.canonicalize() {
            Ok(path) if path.join("Cargo.toml").is_file() => Sdk::Path(path),
            // The SDK is versioned with the contract it carries.
            _ => Sdk::Version(wasm_ccm_host::contract::PACKAGE_VERSION.to_owned()),
        }
    }

    fn dependency(&self) -> String {
        match self {
            // TOML basic strings: escape backslashes and quotes.
            Sdk::Path(path) => format!(
                "{{ path = \"{}\" }}",
                path.display()
                    .to_string()
                    .replace('\\', "\\\\")
                    .replace('"', "\\\"")
            ),
            Sdk::Version(version) => format!("\"{version}\""),
        }
    }
}

/// What to generate.
#[derive(Debug, Clone)]
pub struct NewProvider {
    /// The provider name (`--cloud-provider NAME`, provider IDs `NAME://...`).
    pub name: String,
    /// The directory to create (default: `./NAME-provider`).
    pub dir: Option<PathBuf>,
    /// The interfaces to export besides `identity`, comma-separated WIT names.
    pub exports: String,
    /// Where the SDK comes from.
    pub sdk: Sdk,
}

/// `wasm-ccm new`'s arguments.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// The provider name (`--cloud-provider NAME`, provider IDs `NAME://...`).
    pub name: String,
    /// The directory to create (default: ./NAME-provider).
    pub dir: Option<PathBuf>,
    /// Interfaces to export besides identity, comma-separated: instances-v2,
    /// load-balancer, routes, clusters.
    #[arg(long, default_value = DEFAULT_EXPORTS)]
    pub exports: String,
    /// Depend on the SDK at this path (a checkout's guests/sdk) instead of the
    /// default: this build's checkout when present, else crates.io.
    #[arg(long)]
    pub sdk_path: Option<PathBuf>,
}

/// Runs `wasm-ccm new`: what was written on stdout, or the error on stderr.
pub fn main(args: Args) -> std::process::ExitCode {
    let request = NewProvider {
        name: args.name,
        dir: args.dir,
        exports: args.exports,
        sdk: match args.sdk_path {
            Some(path) => Sdk::Path(path),
            None => Sdk::default_for_this_build(),
        },
    };
    super::exit::exit_code(generate(&request).map(|generated| println!("{generated}")))
}

/// Why nothing was generated.
#[derive(Debug, thiserror::Error)]
pub enum NewError {
    /// The provider name is not usable.
    #[error(
        "invalid provider name {0:?}: use lower-case letters, digits and dashes, starting \
         with a letter (it becomes `--cloud-provider NAME` and the `NAME://` of provider IDs)"
    )]
    Name(String),
    /// An export is not one `new` generates.
    #[error("--exports: unknown interface {0:?}; choose from {1}")]
    Export(String, String),
    /// The directory exists and is not empty.
    #[error("{} already exists and is not empty; choose another directory", .0.display())]
    Exists(PathBuf),
    /// `--sdk-path` does not lead to the SDK.
    #[error("--sdk-path {}: {source}", path.display())]
    Sdk {
        /// The path given.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A file could not be written.
    #[error("cannot write {}: {source}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// What was generated.
#[derive(Debug, Clone)]
pub struct Generated {
    /// The crate's directory.
    pub dir: PathBuf,
    /// The crate's name (`NAME-provider`).
    pub crate_name: String,
    /// The files written, relative to `dir`.
    pub files: Vec<String>,
}

impl std::fmt::Display for Generated {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let dir = self.dir.display();
        let file = self.crate_name.replace('-', "_");
        writeln!(f, "created {} in {dir}:", self.crate_name)?;
        for file in &self.files {
            writeln!(f, "  {file}")?;
        }
        writeln!(f, "next:")?;
        writeln!(f, "  cd {dir}")?;
        writeln!(f, "  cargo test")?;
        writeln!(f, "  cargo build --target wasm32-wasip2 --release")?;
        write!(
            f,
            "  wasm-ccm check target/wasm32-wasip2/release/{file}.wasm --policy policy.yaml \
             --cloud-config cloud-config.json"
        )
    }
}

fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_lowercase())
        && name.len() <= 40
        && !name.ends_with('-')
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

/// `my-cloud` -> `MyCloud`.
fn type_name(name: &str) -> String {
    name.split('-')
        .map(|part| {
            let mut chars = part.chars();
            match chars.next() {
                Some(first) => first.to_ascii_uppercase().to_string() + chars.as_str(),
                None => String::new(),
            }
        })
        .collect()
}

fn fill(template: &str, values: &[(&str, &str)]) -> String {
    values
        .iter()
        .fold(template.to_owned(), |text, (key, value)| {
            text.replace(&format!("{{{{{key}}}}}"), value)
        })
}

fn chosen(exports: &str) -> Result<Vec<&'static Export>, NewError> {
    let mut chosen = Vec::new();
    for wanted in exports.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let export = EXPORTS.iter().find(|e| e.wit == wanted).ok_or_else(|| {
            let names: Vec<&str> = EXPORTS.iter().map(|e| e.wit).collect();
            NewError::Export(wanted.to_owned(), names.join(", "))
        })?;
        if !chosen.iter().any(|c: &&Export| c.wit == export.wit) {
            chosen.push(export);
        }
    }
    // In the contract's order, whatever the order given.
    chosen.sort_by_key(|e| EXPORTS.iter().position(|x| x.wit == e.wit));
    if chosen.iter().any(|e| e.wit == "instances-batch")
        && !chosen.iter().any(|e| e.wit == "instances-v2")
    {
        return Err(NewError::Export(
            "instances-batch".into(),
            "instances-batch answers instances-v2's questions: choose instances-v2 with it".into(),
        ));
    }
    Ok(chosen)
}

fn use_lines(paths: &[String], indent: &str) -> String {
    let mut paths: Vec<&String> = paths.iter().collect();
    paths.sort();
    paths.dedup();
    paths
        .iter()
        .map(|p| format!("{indent}use {p};\n"))
        .collect()
}

/// The files of the crate: (path relative to its directory, text).
fn files(name: &str, exports: &[&Export], sdk: &Sdk) -> Vec<(String, String)> {
    let crate_name = format!("{name}-provider");
    let ty = type_name(name);
    let exports_list = std::iter::once("identity")
        .chain(exports.iter().map(|e| e.wit))
        .collect::<Vec<_>>()
        .join(", ");
    let mut imports: Vec<String> = exports
        .iter()
        .flat_map(|e| e.imports.iter().map(|i| i.to_string()))
        .collect();
    merge_type_imports(&mut imports);
    let test_imports: Vec<String> = exports
        .iter()
        .flat_map(|e| e.test_imports.iter().map(|i| i.to_string()))
        .collect();
    let world_exports: String = exports
        .iter()
        .map(|e| format!("    export wasm-ccm:provider/{}@{{{{contract}}}};\n", e.wit))
        .collect();
    let values = [
        ("name", name),
        ("crate", crate_name.as_str()),
        ("crate_file", &crate_name.replace('-', "_")),
        ("Struct", ty.as_str()),
        ("exports_list", exports_list.as_str()),
        ("contract", wasm_ccm_host::contract::PACKAGE_VERSION),
    ];
    let impls: String = exports.iter().map(|e| fill(e.code, &values)).collect();
    let tests: String = exports.iter().map(|e| fill(e.tests, &values)).collect();
    let macro_names = exports
        .iter()
        .map(|e| e.macro_name)
        .collect::<Vec<_>>()
        .join(", ");
    let lib = fill(
        LIB_RS,
        &[
            ("imports", &use_lines(&imports, "")),
            ("exports", &macro_names),
            ("impls", &impls),
            ("test_imports", &use_lines(&test_imports, "    ")),
            ("tests", &tests),
        ],
    );
    let mut files = vec![
        (
            "Cargo.toml".to_owned(),
            fill(CARGO_TOML, &[("sdk", &sdk.dependency())]),
        ),
        ("src/lib.rs".to_owned(), lib),
        (
            "contract/world.wit".to_owned(),
            fill(WORLD, &[("world_exports", &world_exports)]),
        ),
        ("policy.yaml".to_owned(), POLICY.to_owned()),
        ("cloud-config.json".to_owned(), CLOUD_CONFIG.to_owned()),
        ("README.md".to_owned(), README.to_owned()),
        (".gitignore".to_owned(), GITIGNORE.to_owned()),
    ];
    for (_, text) in &mut files {
        *text = fill(text, &values);
    }
    for (path, text) in WIT {
        files.push((format!("contract/{path}"), (*text).to_owned()));
    }
    files
}

/// Folds the `wasm_ccm_guest::types::...` imports of several exports into one line.
fn merge_type_imports(imports: &mut Vec<String>) {
    const PREFIX: &str = "wasm_ccm_guest::types::";
    let mut names: Vec<String> = Vec::new();
    imports.retain(|import| match import.strip_prefix(PREFIX) {
        Some(rest) => {
            names.extend(
                rest.trim_start_matches('{')
                    .trim_end_matches('}')
                    .split(',')
                    .map(|name| name.trim().to_owned()),
            );
            false
        }
        None => true,
    });
    names.sort();
    names.dedup();
    match names.as_slice() {
        [] => {}
        [one] => imports.push(format!("{PREFIX}{one}")),
        many => imports.push(format!("{PREFIX}{{{}}}", many.join(", "))),
    }
}

/// Writes the crate.
pub fn generate(request: &NewProvider) -> Result<Generated, NewError> {
    if !valid_name(&request.name) {
        return Err(NewError::Name(request.name.clone()));
    }
    let exports = chosen(&request.exports)?;
    // The generated Cargo.toml is read from its own directory: no relative paths.
    let sdk = match &request.sdk {
        Sdk::Path(path) => Sdk::Path(
            path.join("Cargo.toml")
                .canonicalize()
                .map(|manifest| manifest.parent().expect("a file has a parent").to_owned())
                .map_err(|source| NewError::Sdk {
                    path: path.clone(),
                    source,
                })?,
        ),
        version => version.clone(),
    };
    let dir = request
        .dir
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("{}-provider", request.name)));
    if dir.exists() && std::fs::read_dir(&dir).map_or(true, |mut d| d.next().is_some()) {
        return Err(NewError::Exists(dir));
    }
    let mut written = Vec::new();
    for (path, text) in files(&request.name, &exports, &sdk) {
        let full = dir.join(&path);
        let write = |full: &Path| -> std::io::Result<()> {
            if let Some(parent) = full.parent() {
                std::fs::create_dir_all(parent)?;
            }
            std::fs::write(full, text.as_bytes())
        };
        write(&full).map_err(|source| NewError::Write {
            path: full.clone(),
            source,
        })?;
        written.push(path);
    }
    Ok(Generated {
        dir,
        crate_name: format!("{}-provider", request.name),
        files: written,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_exports_are_checked() {
        for good in ["acme", "my-cloud2"] {
            assert!(valid_name(good), "{good}");
        }
        for bad in ["", "Acme", "9cloud", "my_cloud", "cloud-", "a b"] {
            assert!(!valid_name(bad), "{bad}");
        }
        assert_eq!(type_name("my-cloud2"), "MyCloud2");
        assert!(matches!(chosen("instances-v2,lb"), Err(NewError::Export(e, _)) if e == "lb"));
        let order: Vec<_> = chosen("routes, instances-v2,routes")
            .unwrap()
            .iter()
            .map(|e| e.wit)
            .collect();
        assert_eq!(order, ["instances-v2", "routes"]);
    }

    #[test]
    fn the_contract_is_written_whole() {
        let files = files(
            "acme",
            &chosen("instances-v2").unwrap(),
            &Sdk::Version("0.3.0".into()),
        );
        let paths: Vec<&str> = files.iter().map(|(p, _)| p.as_str()).collect();
        assert!(paths.contains(&"contract/deps/wasm-ccm-provider/provider.wit"));
        assert!(paths.contains(&"contract/deps/http.wit"));
        let lib = &files.iter().find(|(p, _)| p == "src/lib.rs").unwrap().1;
        assert!(!lib.contains("{{"), "{lib}");
        assert!(lib.contains("impl InstancesV2 for Acme"));
        let cargo = &files.iter().find(|(p, _)| p == "Cargo.toml").unwrap().1;
        assert!(cargo.contains("wasm-ccm-guest = \"0.3.0\""), "{cargo}");
    }
}
