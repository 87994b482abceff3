//! What a guest sees and writes: no environment, files or sockets; its output is
//! logged, and its text cannot forge log lines or flood errors.

use super::*;

#[tokio::test(flavor = "current_thread")]
async fn guest_sees_no_environment_files_or_sockets_and_its_output_is_logged() {
    let (logs, _guard) = CapturedLogs::install();
    let loader = loader();
    let (_h, bad) = hostile(&loader, "").await;
    let info = act(&bad, &[("hostile/action", "snoop")]).await.unwrap();
    assert_eq!(label(&info, "env"), "");
    assert_eq!(label(&info, "args"), "hostile");
    assert!(
        label(&info, "read-dir-root").starts_with("error"),
        "{info:?}"
    );
    assert!(
        label(&info, "read-etc-passwd").starts_with("error"),
        "{info:?}"
    );
    assert!(label(&info, "tcp-connect").starts_with("error"), "{info:?}");
    let text = logs.text();
    assert!(text.contains("hostile stdout line"), "{text}");
    assert!(text.contains("hostile stderr line"), "{text}");
    assert!(text.contains(r#"provider="hostile""#), "{text}");
}

#[tokio::test(flavor = "current_thread")]
async fn guest_text_cannot_forge_log_lines_or_flood_errors() {
    let (logs, _guard) = CapturedLogs::install();
    let loader = loader();
    let (_h, bad) = hostile(&loader, "").await;
    let err = act(&bad, &[("hostile/action", "forge")]).await.unwrap_err();
    let message = other_message(&err);
    assert!(
        message.starts_with(r"ok\n2026-01-01T00:00:00Z  INFO wasm_ccm: FORGED-LINE\r\u{1b}[2J"),
        "{message}"
    );
    assert!(
        message.len() < 2100,
        "cut at 2 KiB: {} bytes",
        message.len()
    );
    assert!(message.ends_with("more bytes)"), "{message}");
    let text = logs.text();
    // The record, its field and the stdout line are there, on lines of their own.
    assert_eq!(text.matches("FORGED-LINE").count(), 3, "{text}");
    assert!(
        text.contains("FORGED-FIELD") && !text.contains("\nFORGED-FIELD"),
        "{text}"
    );
    for line in text.lines() {
        assert!(
            !line.contains("FORGED")
                || line.contains(r#"provider="hostile""#)
                || line.contains("provider=hostile"),
            "a line a guest started: {line:?}"
        );
        assert!(!line.contains('\x1b') && !line.contains('\r'), "{line:?}");
    }
}
