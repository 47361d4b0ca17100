//! The web console: a single-page application at `/` of the admin endpoint, in plain HTML,
//! CSS and JavaScript modules compiled into the binary (`include_bytes!`: no build step, no
//! CDN, nothing fetched from elsewhere). The page calls the endpoint's JSON API with `fetch`
//! under the Basic credentials the browser was given for the page, and sends the admin token
//! (`GET /api/token`) in `X-Ferromq-Token` on every POST and DELETE.
//!
//! Every answer here carries [`CONTENT_SECURITY_POLICY`]: scripts, styles and connections
//! from this origin only, no inline script or style (the JavaScript is in its own files), no
//! framing (clickjacking), no plugins, forms posting nowhere else. The scripts build the page
//! with DOM calls and put what comes from messages in text nodes, never in `innerHTML`.

use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{HeaderName, HeaderValue, CACHE_CONTROL, CONTENT_TYPE};
use hyper::{HeaderMap, Response};

/// The console's policy: what its pages may load and do.
pub(crate) const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; \
     style-src 'self'; img-src 'self' data:; connect-src 'self'; object-src 'none'; \
     base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

/// One file of the console.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Asset {
    /// The path it is served at.
    pub path: &'static str,
    content_type: &'static str,
    body: &'static [u8],
}

const HTML: &str = "text/html; charset=utf-8";
const JAVASCRIPT: &str = "text/javascript; charset=utf-8";

static ASSETS: &[Asset] = &[
    Asset { path: "/", content_type: HTML, body: include_bytes!("index.html") },
    Asset { path: "/console/app.js", content_type: JAVASCRIPT, body: include_bytes!("app.js") },
    Asset { path: "/console/api.js", content_type: JAVASCRIPT, body: include_bytes!("api.js") },
    Asset { path: "/console/dom.js", content_type: JAVASCRIPT, body: include_bytes!("dom.js") },
    Asset { path: "/console/chart.js", content_type: JAVASCRIPT, body: include_bytes!("chart.js") },
    Asset {
        path: "/console/console.css",
        content_type: "text/css; charset=utf-8",
        body: include_bytes!("console.css"),
    },
    Asset {
        path: "/console/favicon.svg",
        content_type: "image/svg+xml",
        body: include_bytes!("favicon.svg"),
    },
];

/// The console file served at `path`, if any. The page itself answers at `/`, and at
/// `/index.html` and `/admin` (where ActiveMQ's console is) too.
pub(crate) fn asset(path: &str) -> Option<&'static Asset> {
    let path = match path {
        "/index.html" | "/admin" | "/admin/" => "/",
        "/favicon.ico" => "/console/favicon.svg",
        other => other,
    };
    ASSETS.iter().find(|asset| asset.path == path)
}

/// The answer with `asset`, with the console's security headers.
pub(crate) fn serve(asset: &Asset) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from_static(asset.body)));
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static(asset.content_type));
    // Small files: asked again each time, so that a new broker's console is never mixed with
    // an old one's cached modules.
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    secure(headers);
    response
}

/// Sets the headers that keep a console page from being framed, sniffed into another type,
/// or leaking its address to other sites.
pub(crate) fn secure(headers: &mut HeaderMap) {
    headers.insert(
        HeaderName::from_static("content-security-policy"),
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    headers.insert(
        HeaderName::from_static("x-content-type-options"),
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        HeaderName::from_static("referrer-policy"),
        HeaderValue::from_static("no-referrer"),
    );
    headers.insert(HeaderName::from_static("x-frame-options"), HeaderValue::from_static("DENY"));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_is_served_at_the_root_and_where_activemq_has_its_console() {
        for path in ["/", "/index.html", "/admin", "/admin/"] {
            assert_eq!(asset(path).map(|a| a.path), Some("/"), "{path}");
        }
        assert_eq!(asset("/console/app.js").map(|a| a.content_type), Some(JAVASCRIPT));
        assert_eq!(asset("/console/../mod.rs"), None);
        assert_eq!(asset("/console/"), None);
        assert_eq!(asset("/api/broker"), None);
    }

    #[test]
    fn every_module_the_page_loads_is_served() {
        let text = |asset: &Asset| String::from_utf8(asset.body.to_vec()).expect("UTF-8");
        let page = text(asset("/").expect("the page"));
        for reference in page.split(['"', '\'']).filter(|part| part.starts_with("/console/")) {
            assert!(asset(reference).is_some(), "the page names {reference}, not served");
        }
        for module in ASSETS.iter().filter(|a| a.content_type == JAVASCRIPT) {
            for line in text(module).lines().filter(|line| line.starts_with("import ")) {
                let from = line.rsplit(['"', '\'']).nth(1).expect("a module name");
                let path = format!("/console/{}", from.trim_start_matches("./"));
                assert!(asset(&path).is_some(), "{} imports {from}, not served", module.path);
            }
        }
    }

    #[test]
    fn no_asset_writes_markup_from_data_or_runs_inline_script() {
        for asset in ASSETS {
            let text = String::from_utf8_lossy(asset.body);
            assert!(!text.contains("innerHTML"), "{} uses innerHTML", asset.path);
            assert!(!text.contains("outerHTML"), "{} uses outerHTML", asset.path);
            assert!(!text.contains("insertAdjacentHTML"), "{}", asset.path);
            assert!(!text.contains("document.write"), "{}", asset.path);
            assert!(!text.contains("eval("), "{} calls eval", asset.path);
            assert!(
                !text.contains("http://") && !text.contains("https://")
                    || asset.path.ends_with(".svg"),
                "{} names another origin",
                asset.path
            );
        }
        let page = String::from_utf8_lossy(asset("/").expect("the page").body).into_owned();
        // Every <script> has a src and nothing inside: the policy allows no inline script.
        for script in page.split("<script").skip(1) {
            let (tag, rest) = script.split_once('>').unwrap_or_default();
            assert!(tag.contains("src="), "inline script: <script{tag}>");
            assert!(rest.starts_with("</script>"), "a script with a body: <script{script}");
        }
        assert!(!page.contains("style="), "inline style on the page");
    }

    #[test]
    fn answers_carry_the_security_headers() {
        let response = serve(asset("/").expect("the page"));
        let header = |name: &str| response.headers().get(name).and_then(|v| v.to_str().ok());
        assert_eq!(header("content-type"), Some(HTML));
        assert_eq!(header("x-content-type-options"), Some("nosniff"));
        assert_eq!(header("referrer-policy"), Some("no-referrer"));
        let policy = header("content-security-policy").expect("a policy");
        for directive in ["default-src 'self'", "frame-ancestors 'none'", "script-src 'self'"] {
            assert!(policy.contains(directive), "{policy}");
        }
        assert!(!policy.contains("unsafe"), "{policy}");
    }
}
