//! Who may use the dashboard: Host and Origin checks on loopback, and the token when
//! one is set.

mod common;

use common::{Setup, client, send, start};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

#[tokio::test]
async fn another_origin_cannot_act_or_listen_and_a_rebound_host_is_refused() {
    let stack = start(Setup::default()).await;
    // Another web page's script: refused; the dashboard's own page, or no Origin: fine.
    let evil = stack
        .post(
            "/api/backends/local/reset",
            &[("origin", "http://evil.example")],
        )
        .await;
    assert_eq!(evil.status, 403, "{}", evil.text);
    let other_port = stack
        .post(
            "/api/backends/local/reset",
            &[("origin", "http://127.0.0.1:1")],
        )
        .await;
    assert_eq!(other_port.status, 403);
    let null = stack
        .post("/api/config/reload", &[("origin", "null")])
        .await;
    assert_eq!(null.status, 403);
    let own = stack
        .post("/api/backends/local/reset", &[("origin", &stack.base)])
        .await;
    assert_eq!(own.status, 200, "{}", own.text);
    assert_eq!(
        stack.post("/api/backends/local/reset", &[]).await.status,
        200
    );

    // The socket too.
    let mut request = stack.ws_url("").into_client_request().expect("request");
    request
        .headers_mut()
        .insert("origin", "http://evil.example".parse().expect("header"));
    let refused = tokio_tungstenite::connect_async(request).await;
    match refused {
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
            assert_eq!(response.status().as_u16(), 403)
        }
        other => panic!("expected a 403 handshake, got {:?}", other.map(|_| ())),
    }
    let mut request = stack.ws_url("").into_client_request().expect("request");
    request
        .headers_mut()
        .insert("origin", stack.base.parse().expect("header"));
    tokio_tungstenite::connect_async(request)
        .await
        .expect("the dashboard's own origin may listen");

    // DNS rebinding: a page at evil.example resolving to 127.0.0.1 sends Host: evil.example.
    let rebound = send(
        client()
            .get(format!("{}/api/config", stack.base))
            .header("host", "evil.example:8081"),
    )
    .await;
    assert_eq!(rebound.status, 403);
    let localhost = send(
        client()
            .get(format!("{}/api/status", stack.base))
            .header("host", "localhost:8081"),
    )
    .await;
    assert_eq!(localhost.status, 200);
}

#[tokio::test]
async fn a_token_is_required_when_set() {
    let stack = start(Setup {
        customize: Box::new(|o| o.token = Some("s3cret-token".into())),
        ..Setup::default()
    })
    .await;
    let bare = stack.get("/api/status").await;
    assert_eq!(bare.status, 401);
    assert_eq!(bare.json()["error"]["type"], "unauthorized");
    assert_eq!(stack.get("/").await.status, 401);
    let wrong = send(
        client()
            .get(format!("{}/api/status", stack.base))
            .bearer_auth("nope"),
    )
    .await;
    assert_eq!(wrong.status, 401);
    let bearer = send(
        client()
            .get(format!("{}/api/status", stack.base))
            .bearer_auth("s3cret-token"),
    )
    .await;
    assert_eq!(bearer.status, 200);
    assert_eq!(bearer.json()["token_required"], true);
    assert!(!bearer.text.contains("s3cret-token"));

    // ?token= opens the page and sets a cookie that the page's own requests then carry.
    let page = stack.get("/?token=s3cret-token").await;
    assert_eq!(page.status, 200);
    let cookie = page.headers["set-cookie"]
        .to_str()
        .expect("cookie")
        .to_owned();
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );
    let pair = cookie.split(';').next().expect("name=value");
    let with_cookie = send(
        client()
            .get(format!("{}/assets/app.js", stack.base))
            .header("cookie", pair),
    )
    .await;
    assert_eq!(with_cookie.status, 200);
    // Metrics scrapers use the bearer token.
    let metrics = send(
        client()
            .get(format!("{}/metrics", stack.base))
            .bearer_auth("s3cret-token"),
    )
    .await;
    assert_eq!(metrics.status, 200);

    // The socket: refused without, accepted with ?token=.
    assert!(
        tokio_tungstenite::connect_async(stack.ws_url(""))
            .await
            .is_err()
    );
    let (mut socket, _) = tokio_tungstenite::connect_async(stack.ws_url("?token=s3cret-token"))
        .await
        .expect("socket with the token");
    assert_eq!(common::next_event(&mut socket).await["type"], "hello");

    // With a token, the Host check is the token's job (any name reaches it) but Origin
    // still guards actions.
    let by_name = send(
        client()
            .get(format!("{}/api/status", stack.base))
            .header("host", "glider.lan:8081")
            .bearer_auth("s3cret-token"),
    )
    .await;
    assert_eq!(by_name.status, 200);
    let cross = send(
        client()
            .post(format!("{}/api/backends/local/reset", stack.base))
            .header("origin", "http://evil.example")
            .bearer_auth("s3cret-token"),
    )
    .await;
    assert_eq!(cross.status, 403);
}

#[tokio::test]
async fn a_foreign_origin_cannot_make_the_dashboard_page_through_its_history() {
    // `/api/requests` reads history files: another page's script must not be able to
    // make it do that work. The dashboard's own page and clients without Origin may.
    let stack = start(Setup::default()).await;
    let url = format!("{}/api/requests?before=1000000&limit=500", stack.base);
    let foreign = send(client().get(&url).header("origin", "http://evil.example")).await;
    assert_eq!(foreign.status, 403, "{}", foreign.text);
    let own = send(client().get(&url).header("origin", &stack.base)).await;
    assert_eq!(own.status, 200, "{}", own.text);
    assert_eq!(send(client().get(&url)).await.status, 200);
    // Cheap reads stay open to any page, as before.
    let status = send(
        client()
            .get(format!("{}/api/status", stack.base))
            .header("origin", "http://evil.example"),
    )
    .await;
    assert_eq!(status.status, 200);
}
