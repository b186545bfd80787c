//! The operator's page at `/`: one HTML file, one script and one stylesheet, plus the
//! vendored uPlot that draws its charts (assets/vendor/uplot, MIT), all embedded in the
//! binary (no build step, nothing fetched from elsewhere). It reads `/api/*` once and
//! then follows `/ws`.

use axum::extract::Path;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};

const INDEX: &str = include_str!("../assets/index.html");
const APP_JS: &str = include_str!("../assets/app.js");
const APP_CSS: &str = include_str!("../assets/app.css");
const ICON: &str = include_str!("../assets/icon.svg");
const UPLOT_JS: &str = include_str!("../assets/vendor/uplot/uPlot.iife.min.js");
const UPLOT_CSS: &str = include_str!("../assets/vendor/uplot/uPlot.min.css");
const UPLOT_LICENSE: &str = include_str!("../assets/vendor/uplot/LICENSE");

fn asset_response(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}

/// `GET /`
pub async fn index() -> Response {
    asset_response("text/html; charset=utf-8", INDEX)
}

/// `GET /assets/{file}`
pub async fn asset(Path(file): Path<String>) -> Response {
    match file.as_str() {
        "app.js" => asset_response("text/javascript; charset=utf-8", APP_JS),
        "app.css" => asset_response("text/css; charset=utf-8", APP_CSS),
        "icon.svg" => asset_response("image/svg+xml", ICON),
        "uplot.js" => asset_response("text/javascript; charset=utf-8", UPLOT_JS),
        "uplot.css" => asset_response("text/css; charset=utf-8", UPLOT_CSS),
        "uplot-LICENSE.txt" => asset_response("text/plain; charset=utf-8", UPLOT_LICENSE),
        _ => crate::rest::error(StatusCode::NOT_FOUND, "not_found", "no such asset"),
    }
}

/// `GET /favicon.ico`: browsers ask for it whatever the page says; the icon is SVG.
pub async fn favicon() -> Response {
    asset_response("image/svg+xml", ICON)
}
