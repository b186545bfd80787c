//! A stop reason's `as_str` is its serialized name (the context log stores it as text).

use glider_ngl::StopReason;

#[test]
fn as_str_is_the_serialized_name() {
    for reason in StopReason::ALL {
        let json = serde_json::to_string(&reason).expect("serialize");
        assert_eq!(json, format!("\"{}\"", reason.as_str()));
    }
}
