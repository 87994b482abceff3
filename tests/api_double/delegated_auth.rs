//! Delegated authentication and authorization: TokenReview and SubjectAccessReview.

use super::*;

/// Delegated authentication and authorization as a server on the API server uses them:
/// `TokenReview` says who a bearer token is, `SubjectAccessReview` whether that user
/// may `get` a non-resource path, both created with kube's typed client.
#[tokio::test]
async fn token_and_subject_access_reviews_answer_from_users_and_grants() {
    use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
    use k8s_openapi::api::authorization::v1::{
        NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
    };
    let cluster = Cluster::start().await;
    let scraper = "system:serviceaccount:monitoring:prometheus";
    cluster
        .api
        .add_user("t-scraper", scraper, &["system:serviceaccounts"]);
    cluster.api.add_user("t-other", "someone", &[]);
    cluster.api.allow_non_resource(scraper, "get", "/metrics");
    let client = {
        wasm_ccm_host::tls::install_crypto_provider();
        Client::try_from(Config::new(cluster.api.url().parse().unwrap())).unwrap()
    };

    let reviews: Api<TokenReview> = Api::all(client.clone());
    let review = |token: &str| TokenReview {
        spec: TokenReviewSpec {
            token: token.into(),
            ..Default::default()
        },
        ..Default::default()
    };
    let known = reviews
        .create(&PostParams::default(), &review("t-scraper"))
        .await
        .unwrap();
    let status = known.status.unwrap();
    assert_eq!(status.authenticated, Some(true));
    assert_eq!(status.user.unwrap().username.as_deref(), Some(scraper));
    let unknown = reviews
        .create(&PostParams::default(), &review("forged"))
        .await
        .unwrap();
    assert_eq!(unknown.status.unwrap().authenticated, Some(false));

    let access: Api<SubjectAccessReview> = Api::all(client);
    let may = |user: &str, verb: &str, path: &str| {
        let access = access.clone();
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(user.into()),
                non_resource_attributes: Some(NonResourceAttributes {
                    path: Some(path.into()),
                    verb: Some(verb.into()),
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        async move {
            access
                .create(&PostParams::default(), &review)
                .await
                .unwrap()
                .status
                .unwrap()
                .allowed
        }
    };
    assert!(may(scraper, "get", "/metrics").await);
    assert!(!may(scraper, "get", "/debug/pprof").await);
    assert!(!may("someone", "get", "/metrics").await);
    // Counted like any request, for the RBAC checks.
    assert!(
        cluster
            .api
            .accesses()
            .iter()
            .any(|a| a.group == "authorization.k8s.io"
                && a.resource == "subjectaccessreviews"
                && a.verb == "create")
    );
}
