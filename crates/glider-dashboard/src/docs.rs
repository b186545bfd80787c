//! `/docs`: the project's own user docs (`docs/*.md` and `README.md`, embedded at build
//! time) rendered to HTML, with links between them rewritten to stay under `/docs`.

use axum::extract::Path;
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Response};
use pulldown_cmark::{CowStr, Event, Options, Parser, Tag, TagEnd};

include!(concat!(env!("OUT_DIR"), "/docs.rs"));

/// The title of a page: its first `# ` heading, else its name.
fn title(name: &str, markdown: &str) -> String {
    markdown
        .lines()
        .find_map(|l| l.strip_prefix("# "))
        .map(|t| t.trim().to_owned())
        .unwrap_or_else(|| name.to_owned())
}

/// A link to another doc (`docs/x.md`, `x.md#part`, `../README.md`) → `/docs/x#part`.
fn rewrite_link(dest: &str) -> Option<String> {
    if dest.contains("://") || dest.starts_with('/') || dest.starts_with('#') {
        return None;
    }
    let (path, fragment) = match dest.split_once('#') {
        Some((path, fragment)) => (path, Some(fragment)),
        None => (dest, None),
    };
    let file = path.rsplit('/').next()?;
    let stem = file.strip_suffix(".md")?;
    let name = stem.to_ascii_lowercase();
    PAGES.iter().find(|(page, _)| *page == name)?;
    Some(match fragment {
        Some(fragment) => format!("/docs/{name}#{fragment}"),
        None => format!("/docs/{name}"),
    })
}

/// A heading's anchor as GitHub makes it: lowercase, spaces to `-`, other punctuation
/// dropped (so `docs/x.md#some-heading` links keep working here).
fn slug(text: &str) -> String {
    text.trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// Give every heading without an explicit id its slug.
fn with_heading_ids(mut events: Vec<Event<'_>>) -> Vec<Event<'_>> {
    for i in 0..events.len() {
        if !matches!(&events[i], Event::Start(Tag::Heading { id: None, .. })) {
            continue;
        }
        let text: String = events[i + 1..]
            .iter()
            .take_while(|e| !matches!(e, Event::End(TagEnd::Heading(_))))
            .filter_map(|e| match e {
                Event::Text(t) | Event::Code(t) => Some(t.as_ref()),
                _ => None,
            })
            .collect();
        if let Event::Start(Tag::Heading { id, .. }) = &mut events[i] {
            *id = Some(CowStr::from(slug(&text)));
        }
    }
    events
}

/// Markdown to HTML, with doc links rewritten and headings given anchors.
pub fn render(markdown: &str) -> String {
    let options = Options::ENABLE_TABLES | Options::ENABLE_STRIKETHROUGH;
    let events = Parser::new_ext(markdown, options).map(|event| match event {
        Event::Start(Tag::Link {
            link_type,
            dest_url,
            title,
            id,
        }) => {
            let dest_url = rewrite_link(&dest_url)
                .map(CowStr::from)
                .unwrap_or(dest_url);
            Event::Start(Tag::Link {
                link_type,
                dest_url,
                title,
                id,
            })
        }
        other => other,
    });
    let mut html = String::new();
    pulldown_cmark::html::push_html(&mut html, with_heading_ids(events.collect()).into_iter());
    html
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn layout(title: &str, body: &str) -> Html<String> {
    Html(format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><title>{} · Glider docs</title><link rel=\"stylesheet\" href=\"/assets/app.css\"><link rel=\"icon\" href=\"/assets/icon.svg\" type=\"image/svg+xml\"></head><body class=\"doc\"><header class=\"top\"><a class=\"brand\" href=\"/\">Glider</a><nav><a href=\"/\">Dashboard</a><a href=\"/docs\">Docs</a><a href=\"/metrics\">Metrics</a></nav></header><main class=\"doc-body\">{body}</main></body></html>",
        escape(title)
    ))
}

/// `GET /docs`: the list of pages.
pub async fn index() -> Response {
    let items: String = PAGES
        .iter()
        .map(|(name, markdown)| {
            format!(
                "<li><a href=\"/docs/{name}\">{}</a> <code>{name}</code></li>",
                escape(&title(name, markdown))
            )
        })
        .collect();
    layout(
        "Docs",
        &format!("<h1>Glider documentation</h1><p>The project's own docs, as shipped with this binary.</p><ul class=\"doc-index\">{items}</ul>"),
    )
    .into_response()
}

/// `GET /docs/{page}` (with or without `.md`).
pub async fn page(Path(name): Path<String>) -> Response {
    let name = name.trim_end_matches(".md").to_ascii_lowercase();
    match PAGES.iter().find(|(page, _)| *page == name) {
        Some((name, markdown)) => layout(&title(name, markdown), &render(markdown)).into_response(),
        None => (
            StatusCode::NOT_FOUND,
            layout(
                "Not found",
                &format!(
                    "<h1>No such page</h1><p>{} is not one of the docs. <a href=\"/docs\">All pages</a>.</p>",
                    escape(&name)
                ),
            ),
        )
            .into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_docs_are_embedded_and_link_to_each_other() {
        let names: Vec<&str> = PAGES.iter().map(|(n, _)| *n).collect();
        for expected in ["readme", "configuration", "pipeline", "dashboard"] {
            assert!(
                names.contains(&expected),
                "{expected} missing from {names:?}"
            );
        }
        assert_eq!(
            rewrite_link("docs/configuration.md").as_deref(),
            Some("/docs/configuration")
        );
        assert_eq!(
            rewrite_link("../README.md#layout").as_deref(),
            Some("/docs/readme#layout")
        );
        assert_eq!(rewrite_link("https://example.com/x.md"), None);
        assert_eq!(rewrite_link("nothere.md"), None);
        let html = render("| a | b |\n|---|---|\n| 1 | 2 |\n\nsee [c](docs/configuration.md)");
        assert!(html.contains("<table>"), "{html}");
        assert!(html.contains("href=\"/docs/configuration\""), "{html}");
        let html = render("## `GET /api/status`: now\n\n## Security\n");
        assert!(html.contains("<h2 id=\"get-apistatus-now\">"), "{html}");
        assert!(html.contains("<h2 id=\"security\">"), "{html}");
    }
}
