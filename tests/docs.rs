//! The documentation's links hold: every relative link of `README.md` and `docs/*.md` names a
//! file or directory that exists (relative to the linking file's directory), and every
//! `#anchor` (after a markdown file, or alone for the same file) is the GitHub slug of one of
//! that file's headings. Links inside fenced code blocks and inline code are not links and are
//! skipped; `http:`, `https:` and `mailto:` links are not checked; an anchor after a file that
//! is not markdown (a line of a source file) is not checked.
//!
//! The alerts' `runbook_url`s of `config/prometheus/alerts.yaml` are checked the same way: the
//! file they name in this repository and its heading. That each alert has one, and its form,
//! is `tests/monitoring.rs`'s.
//!
//! A small hand parser, no markdown crate: it understands fences (```` ``` ```` and `~~~`, of
//! any length), inline code spans, ATX headings (`## …`), inline links and images
//! (`[text](target "title")`, `<target>` too) and reference definitions (`[id]: target`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Where links are raw GitHub addresses of this repository's files (the runbook URLs).
const BLOB: &str = "https://github.com/agentfleet/agentfleet/blob/main/";

/// GitHub's anchor for a heading's text: lowercase; every character that is not a letter, a
/// digit, a space, `-` or `_` dropped; spaces become `-`. Markdown is rendered first: inline
/// code keeps its text, a link its text, emphasis markers go (they are dropped anyway).
fn slug(heading: &str) -> String {
    rendered(heading)
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// A heading's text as GitHub renders it, as far as the anchor cares: `[text](url)` is
/// `text`. (Backticks, `*` and the like are not letters, so the slug drops them.)
fn rendered(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(open) = rest.find('[') {
        let Some(close) = rest[open..].find("](").map(|i| open + i) else {
            break;
        };
        let Some(end) = rest[close..].find(')').map(|i| close + i) else {
            break;
        };
        out.push_str(&rest[..open]);
        out.push_str(&rest[open + 1..close]);
        rest = &rest[end + 1..];
    }
    out.push_str(rest);
    out
}

/// A line opening or closing a fence: its character and length.
fn fence(line: &str) -> Option<(char, usize)> {
    let t = line.trim_start();
    let c = t.chars().next().filter(|c| matches!(c, '`' | '~'))?;
    let n = t.chars().take_while(|&x| x == c).count();
    (n >= 3).then_some((c, n))
}

/// `line` with its inline code spans blanked out (a span: a run of N backticks up to the next
/// run of exactly N). An unclosed run is literal text.
fn without_code(line: &str) -> String {
    let chars: Vec<char> = line.chars().collect();
    let mut out = String::with_capacity(line.len());
    let mut i = 0;
    while i < chars.len() {
        if chars[i] != '`' {
            out.push(chars[i]);
            i += 1;
            continue;
        }
        let n = chars[i..].iter().take_while(|&&c| c == '`').count();
        // The closing run: exactly n backticks.
        let mut j = i + n;
        let mut closed = None;
        while j < chars.len() {
            if chars[j] == '`' {
                let m = chars[j..].iter().take_while(|&&c| c == '`').count();
                if m == n {
                    closed = Some(j + m);
                    break;
                }
                j += m;
            } else {
                j += 1;
            }
        }
        match closed {
            Some(end) => {
                out.extend(std::iter::repeat_n(' ', end - i));
                i = end;
            }
            None => {
                out.extend(&chars[i..i + n]);
                i += n;
            }
        }
    }
    out
}

/// A markdown file, as far as links care: its headings' anchors and its links (line, target).
#[derive(Debug, Default)]
struct Doc {
    anchors: BTreeSet<String>,
    links: Vec<(usize, String)>,
}

fn parse(text: &str) -> Doc {
    let mut doc = Doc::default();
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut open: Option<(char, usize)> = None;
    for (n, line) in text.lines().enumerate() {
        let number = n + 1;
        if let Some((c, len)) = open {
            if fence(line).is_some_and(|(d, m)| d == c && m >= len)
                && line.trim().chars().all(|x| x == c)
            {
                open = None;
            }
            continue;
        }
        if let Some(f) = fence(line) {
            open = Some(f);
            continue;
        }
        // A heading keeps its inline code (GitHub's anchor keeps the code's text); links are
        // looked for outside it.
        let t = line.trim_start();
        let hashes = t.chars().take_while(|&c| c == '#').count();
        if (1..=6).contains(&hashes) && t[hashes..].starts_with(' ') {
            let text = t[hashes..].trim().trim_end_matches('#');
            let base = slug(text);
            let count = seen.entry(base.clone()).or_insert(0);
            let anchor = if *count == 0 {
                base
            } else {
                format!("{base}-{count}")
            };
            *count += 1;
            doc.anchors.insert(anchor);
        }
        doc.links.extend(
            targets(&without_code(line))
                .into_iter()
                .map(|t| (number, t)),
        );
    }
    doc
}

/// The link targets of one line (inline code already blanked): `[…](target)`, `![…](target)`,
/// `[id]: target`.
fn targets(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let t = line.trim_start();
    if t.starts_with('[') {
        if let Some(close) = t.find("]:") {
            if !t[1..close].contains(']') {
                if let Some(target) = t[close + 2..].split_whitespace().next() {
                    out.push(target.trim_matches(['<', '>']).to_string());
                }
            }
        }
    }
    let mut rest = line;
    while let Some(at) = rest.find("](") {
        let after = &rest[at + 2..];
        let target = if let Some(inner) = after.strip_prefix('<') {
            inner.split('>').next().unwrap_or_default()
        } else {
            // Up to the closing parenthesis, balancing any inside; a title follows a space.
            let mut depth = 0usize;
            let end = after
                .char_indices()
                .find(|&(_, c)| match c {
                    '(' => {
                        depth += 1;
                        false
                    }
                    ')' if depth == 0 => true,
                    ')' => {
                        depth -= 1;
                        false
                    }
                    c => c.is_whitespace(),
                })
                .map_or(after.len(), |(i, _)| i);
            &after[..end]
        };
        if !target.is_empty() {
            out.push(target.to_string());
        }
        rest = after;
    }
    out
}

/// `%XX` decoded (a link to a file with a space in its name, say).
fn decoded(path: &str) -> String {
    let bytes = path.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn is_markdown(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "md")
}

/// Reads and parses markdown files once each.
#[derive(Default)]
struct Docs(BTreeMap<PathBuf, Option<Doc>>);

impl Docs {
    fn get(&mut self, path: &Path) -> Option<&Doc> {
        self.0
            .entry(path.to_path_buf())
            .or_insert_with(|| std::fs::read_to_string(path).ok().map(|t| parse(&t)))
            .as_ref()
    }
}

/// Why the link `target` of the file `from` is broken, if it is.
fn broken(docs: &mut Docs, from: &Path, target: &str) -> Option<String> {
    if ["http:", "https:", "mailto:"]
        .iter()
        .any(|s| target.starts_with(s))
    {
        return None;
    }
    let (path, anchor) = match target.split_once('#') {
        Some((p, a)) => (p, Some(a)),
        None => (target, None),
    };
    let file = if path.is_empty() {
        from.to_path_buf()
    } else if let Some(from_root) = path.strip_prefix('/') {
        root().join(decoded(from_root))
    } else {
        from.parent().unwrap_or(root()).join(decoded(path))
    };
    if !file.exists() {
        return Some("no such file".into());
    }
    let anchor = anchor?;
    if !is_markdown(&file) {
        return None;
    }
    let Some(doc) = docs.get(&file) else {
        return Some("not readable".into());
    };
    (!doc.anchors.contains(anchor)).then(|| format!("no heading with the anchor #{anchor}"))
}

/// `README.md` and `docs/*.md`.
fn markdown_files() -> Vec<PathBuf> {
    let mut files = vec![root().join("README.md")];
    let mut pages: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .map(|dir| {
            dir.filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| is_markdown(p))
                .collect()
        })
        .unwrap_or_default();
    pages.sort();
    files.extend(pages);
    files
}

fn shown(path: &Path) -> String {
    path.strip_prefix(root())
        .unwrap_or(path)
        .display()
        .to_string()
}

#[test]
fn every_relative_link_and_anchor_of_the_docs_resolves() {
    let mut docs = Docs::default();
    let mut bad = Vec::new();
    let mut checked = 0;
    for file in markdown_files() {
        let links = match docs.get(&file) {
            Some(doc) => doc.links.clone(),
            None => {
                bad.push(format!("{}: not readable", shown(&file)));
                continue;
            }
        };
        for (line, target) in links {
            checked += 1;
            if let Some(why) = broken(&mut docs, &file, &target) {
                bad.push(format!("{}:{line}: {target} ({why})", shown(&file)));
            }
        }
    }
    assert!(checked > 0, "no links found: is the parser broken?");
    assert!(
        bad.is_empty(),
        "{} broken link(s):\n{}",
        bad.len(),
        bad.join("\n")
    );
}

#[test]
fn every_runbook_url_names_a_heading_of_the_docs() {
    let rules = root().join("config/prometheus/alerts.yaml");
    let text = std::fs::read_to_string(&rules).unwrap_or_default();
    let mut docs = Docs::default();
    let mut bad = Vec::new();
    let mut checked = 0;
    for (n, line) in text.lines().enumerate() {
        let Some(url) = line.trim().strip_prefix("runbook_url:") else {
            continue;
        };
        let url = url.trim().trim_matches(['"', '\'']);
        checked += 1;
        let why = match url.strip_prefix(BLOB) {
            None => Some(format!("not a file of this repository ({BLOB}…)")),
            Some(path) => broken(&mut docs, &root().join("README.md"), &format!("/{path}")),
        };
        if let Some(why) = why {
            bad.push(format!("{}:{}: {url} ({why})", shown(&rules), n + 1));
        }
    }
    assert!(checked > 0, "no runbook_url in {}", shown(&rules));
    assert!(
        bad.is_empty(),
        "{} broken runbook URL(s):\n{}",
        bad.len(),
        bad.join("\n")
    );
}

/// The `.rs` files under `dir`, recursively.
fn rust_files(dir: &Path, into: &mut Vec<PathBuf>) {
    let entries = std::fs::read_dir(dir).into_iter().flatten();
    for entry in entries.filter_map(Result::ok) {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, into);
        } else if path.extension().is_some_and(|e| e == "rs") {
            into.push(path);
        }
    }
}

/// Every metric name the code writes as a string literal (`"agentfleet_…"`).
fn metric_names() -> BTreeSet<String> {
    let mut files = Vec::new();
    rust_files(&root().join("src"), &mut files);
    let mut names = BTreeSet::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        for (i, _) in text.match_indices("\"agentfleet_") {
            let name: String = text[i + 1..]
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_')
                .collect();
            if text[i + 1 + name.len()..].starts_with('"') {
                names.insert(name);
            }
        }
    }
    names
}

#[test]
fn every_metric_is_in_the_operating_guide() {
    let names = metric_names();
    assert!(names.len() > 40, "the scan found the metrics: {names:?}");
    let guide = std::fs::read_to_string(root().join("docs/operating.md")).unwrap();
    let missing: Vec<&String> = names
        .iter()
        .filter(|n| !guide.contains(&format!("`{n}")))
        .collect();
    assert!(
        missing.is_empty(),
        "metrics not in docs/operating.md's list: {missing:?}"
    );
}

#[test]
fn the_license_cargo_names_is_in_the_repository() {
    let manifest = std::fs::read_to_string(root().join("Cargo.toml")).unwrap();
    assert!(
        manifest.contains("license = \"Apache-2.0\""),
        "Cargo.toml's license"
    );
    let text = std::fs::read_to_string(root().join("LICENSE")).expect("a LICENSE file");
    let words: Vec<&str> = text.split_whitespace().take(4).collect();
    assert_eq!(words, ["Apache", "License", "Version", "2.0,"]);
    assert!(
        text.contains("END OF TERMS AND CONDITIONS"),
        "the whole text"
    );
}

#[test]
fn slugs_are_githubs() {
    assert_eq!(slug("Run the tests"), "run-the-tests");
    assert_eq!(
        slug("Checkpoints that outlive Redis: the archive"),
        "checkpoints-that-outlive-redis-the-archive"
    );
    assert_eq!(
        slug("The gateway (`agentfleet gateway`)"),
        "the-gateway-agentfleet-gateway"
    );
    assert_eq!(
        slug("Many agents in one process (`bench/pool.rs`)"),
        "many-agents-in-one-process-benchpoolrs"
    );
    assert_eq!(
        slug("Tools that act: HTTP and MCP"),
        "tools-that-act-http-and-mcp"
    );
    assert_eq!(slug("A [linked](x.md) *word*"), "a-linked-word");
    assert_eq!(
        slug("snake_case and  two  spaces"),
        "snake_case-and--two--spaces"
    );
    assert_eq!(slug("Grüße, 2026"), "grüße-2026");
    assert_eq!(slug("AgentfleetCyclesFailing"), "agentfleetcyclesfailing");
}

#[test]
fn the_parser_finds_links_and_headings_but_not_code() {
    let doc = parse(
        "# Title\n\
         A [link](a.md#x), an ![image](img.png) and `[code](no.md)`.\n\
         ```sh\n\
         [fenced](no.md)\n\
         # not a heading\n\
         ```\n\
         ## Title\n\
         ````md\n\
         ```\n\
         [still fenced](no.md)\n\
         ````\n\
         [ref]: b.md#y\n\
         A link [over\n\
         two lines](c.md) and <https://example.com> and [t](<d e.md> \"title\").\n\
         ``a `tick` [in code](no.md)`` then [after](e.md \"T\") and [here](#the-pool-process)\n\
         ### The `pool` process\n",
    );
    assert_eq!(
        doc.links,
        vec![
            (2, "a.md#x".to_string()),
            (2, "img.png".to_string()),
            (12, "b.md#y".to_string()),
            (14, "c.md".to_string()),
            (14, "d e.md".to_string()),
            (15, "e.md".to_string()),
            (15, "#the-pool-process".to_string()),
        ]
    );
    assert_eq!(
        doc.anchors,
        BTreeSet::from([
            "title".to_string(),
            "title-1".to_string(),
            "the-pool-process".to_string(),
        ])
    );
}
