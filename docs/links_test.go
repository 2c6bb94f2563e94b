// Package docs holds the repository's documentation; its tests check that
// the relative links between the Markdown files, and the docs/*.md paths
// that source comments cite, lead somewhere.
package docs

import (
	"bufio"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// root is the repository root, seen from this package's directory.
const root = ".."

// skipDirs are directories whose files are build outputs, caches or
// another tool's, not the repository's documentation.
var skipDirs = map[string]bool{".git": true, "build": true, ".cache": true, ".dev": true, "bin": true, "node_modules": true}

// mdFiles returns every .md file under root, as slash paths relative to it.
func mdFiles(t *testing.T) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != root && (skipDirs[d.Name()] || strings.HasPrefix(d.Name(), ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(p, ".md") {
			rel, err := filepath.Rel(root, p)
			if err != nil {
				return err
			}
			out = append(out, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) < 10 {
		t.Fatalf("found %d Markdown files under %s, want the repository's", len(out), root)
	}
	return out
}

// mdLink is one link of a Markdown file: its target as written and the
// line it is on.
type mdLink struct {
	target string
	line   int
}

var (
	inlineLink = regexp.MustCompile(`!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)`)
	refDef     = regexp.MustCompile(`^\s{0,3}\[[^\]]+\]:\s*(?:<([^>]*)>|(\S+))`)
	atxHeading = regexp.MustCompile(`^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$`)
	htmlAnchor = regexp.MustCompile(`<a\s+(?:name|id)="([^"]+)"`)
	codeSpan   = regexp.MustCompile("`+[^`]*`+")
	linkText   = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)
	htmlTag    = regexp.MustCompile(`<[^>]+>`)
)

// parsed is what the checks need of one Markdown file: its links and the
// anchors its headings produce.
type parsed struct {
	links   []mdLink
	anchors map[string]bool
}

// parseMarkdown reads the links (outside code) and heading anchors of a
// Markdown text.
func parseMarkdown(text string) parsed {
	p := parsed{anchors: map[string]bool{}}
	seen := map[string]int{}
	addAnchor := func(heading string) {
		a := anchor(heading)
		if n := seen[a]; n > 0 {
			p.anchors[fmt.Sprintf("%s-%d", a, n)] = true
		} else {
			p.anchors[a] = true
		}
		seen[a]++
	}
	var fence, prev string
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		trim := strings.TrimSpace(line)
		if fence != "" {
			if strings.HasPrefix(trim, fence) {
				fence = ""
			}
			continue
		}
		if strings.HasPrefix(trim, "```") || strings.HasPrefix(trim, "~~~") {
			fence = trim[:3]
			continue
		}
		for _, m := range htmlAnchor.FindAllStringSubmatch(line, -1) {
			p.anchors[m[1]] = true
		}
		if m := atxHeading.FindStringSubmatch(line); m != nil {
			addAnchor(m[2])
		} else if prev != "" && !strings.HasPrefix(prev, "|") && (isRule(trim, '=') || isRule(trim, '-')) {
			addAnchor(prev)
		}
		prev = trim
		bare := codeSpan.ReplaceAllString(line, "")
		for _, m := range inlineLink.FindAllStringSubmatch(bare, -1) {
			p.links = append(p.links, mdLink{m[1], n})
		}
		if m := refDef.FindStringSubmatch(bare); m != nil && m[1]+m[2] != "" {
			p.links = append(p.links, mdLink{m[1] + m[2], n})
		}
	}
	return p
}

// isRule reports whether s is a setext underline of c.
func isRule(s string, c byte) bool {
	return len(s) >= 2 && strings.Trim(s, string(c)) == ""
}

// anchor is the fragment GitHub gives a heading: its text (links reduced
// to their text, code marks and tags dropped), lowercased, every character
// other than a letter, digit, '-' or '_' dropped and each space turned
// into '-'.
func anchor(heading string) string {
	s := linkText.ReplaceAllString(heading, "$1")
	s = htmlTag.ReplaceAllString(s, "")
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.IsMark(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// external reports whether a link target leaves the repository.
func external(target string) bool {
	if strings.HasPrefix(target, "//") {
		return true
	}
	u, err := url.Parse(target)
	return err == nil && u.Scheme != ""
}

// corpus parses files once, keyed by their slash path relative to root.
type corpus map[string]parsed

func (c corpus) get(rel string) (parsed, error) {
	if p, ok := c[rel]; ok {
		return p, nil
	}
	b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(rel)))
	if err != nil {
		return parsed{}, err
	}
	p := parseMarkdown(string(b))
	c[rel] = p
	return p, nil
}

// checkTarget resolves target, written in the file from (a slash path
// relative to root), and says what is wrong with it, or "".
func (c corpus) checkTarget(from, target string) string {
	path, frag, _ := strings.Cut(target, "#")
	path, err := url.PathUnescape(path)
	if err != nil {
		return fmt.Sprintf("bad escape: %v", err)
	}
	rel := from
	if path != "" {
		if strings.HasPrefix(path, "/") {
			return "absolute path (GitHub resolves it against the site, not the repository)"
		}
		rel = filepath.ToSlash(filepath.Join(filepath.Dir(from), path))
		if rel == ".." || strings.HasPrefix(rel, "../") {
			return "leaves the repository"
		}
		st, err := os.Stat(filepath.Join(root, filepath.FromSlash(rel)))
		if err != nil {
			return "no such file or directory"
		}
		if frag == "" || st.IsDir() || !strings.HasSuffix(rel, ".md") {
			return ""
		}
	}
	if frag == "" {
		return ""
	}
	frag, err = url.PathUnescape(frag)
	if err != nil {
		return fmt.Sprintf("bad escape in the anchor: %v", err)
	}
	p, err := c.get(rel)
	if err != nil {
		return err.Error()
	}
	if !p.anchors[strings.ToLower(frag)] {
		return fmt.Sprintf("no heading of %s makes the anchor #%s", rel, frag)
	}
	return ""
}

// TestLinksResolve: every relative link of every Markdown file names a file
// or directory that exists, and an anchor into a Markdown file names one of
// its headings.
func TestLinksResolve(t *testing.T) {
	c := corpus{}
	checked := 0
	for _, f := range mdFiles(t) {
		p, err := c.get(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range p.links {
			if external(l.target) {
				continue
			}
			checked++
			if why := c.checkTarget(f, l.target); why != "" {
				t.Errorf("%s:%d: link %s: %s", f, l.line, l.target, why)
			}
		}
	}
	if checked < 50 {
		t.Errorf("checked %d relative links, want the repository's (is the link pattern broken?)", checked)
	}
}

// docsRef is a docs/*.md path, with its anchor, as a source comment cites it.
var docsRef = regexp.MustCompile(`\bdocs/([A-Za-z0-9_.-]+\.md)(#[A-Za-z0-9_-]+)?`)

// sectionRef is a Markdown file and one of its sections by title, as a
// comment cites it: (docs/kubernetes.md, "The image").
var sectionRef = regexp.MustCompile(`([A-Za-z0-9_./-]*[A-Za-z0-9_-]\.md),? "([^"]+)"`)

// sourceExts are the files whose citations of Markdown files are checked.
var sourceExts = map[string]bool{".go": true, ".c": true, ".h": true, ".sh": true, ".yaml": true, ".yml": true, ".py": true, ".txt": true}

// TestSourcesCiteExistingDocs: a Markdown file of docs/ (and its #anchor)
// named in a Go, C, shell, Python, YAML or Makefile line exists (and has
// that heading), read from the repository root; so does a section cited
// by its title after the file's name, the file read from the citing
// file's directory, else from the root.
func TestSourcesCiteExistingDocs(t *testing.T) {
	c := corpus{}
	cited := 0
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != root && (skipDirs[d.Name()] || strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !sourceExts[filepath.Ext(p)] && d.Name() != "Makefile" {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		for i, line := range strings.Split(string(b), "\n") {
			for _, m := range docsRef.FindAllStringSubmatch(line, -1) {
				cited++
				if why := c.checkTarget("README.md", "docs/"+m[1]+m[2]); why != "" {
					t.Errorf("%s:%d: cites docs/%s%s: %s", rel, i+1, m[1], m[2], why)
				}
			}
			for _, m := range sectionRef.FindAllStringSubmatch(line, -1) {
				cited++
				if why := c.checkSection(rel, m[1], m[2]); why != "" {
					t.Errorf("%s:%d: cites %s, %q: %s", rel, i+1, m[1], m[2], why)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if cited < 10 {
		t.Errorf("%d citations of Markdown files in the sources, want the repository's (is a pattern broken?)", cited)
	}
}

// hasHeading reports whether a heading's anchor is a, or starts with a's
// words: a citation may leave out a heading's tail, such as "Security" for
// "Security (`src/trust.c`)".
func (p parsed) hasHeading(a string) bool {
	if p.anchors[a] {
		return true
	}
	for h := range p.anchors {
		if strings.HasPrefix(h, a+"-") {
			return true
		}
	}
	return false
}

// checkSection resolves file, cited in from, against from's directory and
// then the root, and says what is wrong with its section title, or "".
func (c corpus) checkSection(from, file, title string) string {
	for _, cand := range []string{filepath.ToSlash(filepath.Join(filepath.Dir(from), file)), filepath.ToSlash(filepath.Clean(file))} {
		if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(cand))); err != nil {
			continue
		}
		p, err := c.get(cand)
		if err != nil {
			return err.Error()
		}
		if !p.hasHeading(anchor(title)) {
			return fmt.Sprintf("%s has no heading %q", cand, title)
		}
		return ""
	}
	return "no such file"
}

// TestAnchorRule pins the heading-to-anchor rule on GitHub's own examples.
func TestAnchorRule(t *testing.T) {
	for _, tc := range []struct{ heading, want string }{
		{"Quick start on a GPU node", "quick-start-on-a-gpu-node"},
		{"The `gpuprobe` commands", "the-gpuprobe-commands"},
		{"What's new? (2.0)", "whats-new-20"},
		{"snake_case and kebab-case", "snake_case-and-kebab-case"},
		{"A [link](x.md) inside", "a-link-inside"},
		{"Ünïcode — dash", "ünïcode--dash"},
	} {
		if got := anchor(tc.heading); got != tc.want {
			t.Errorf("anchor(%q) = %q, want %q", tc.heading, got, tc.want)
		}
	}
	p := parseMarkdown("# Limits\n\n## Limits\n\nSetext\n------\n\n```\n# not a heading\n[x](gone.md)\n```\n[y](`kept.md`) `[z](code.md)` [w](real.md#Limits-1)\n")
	for _, a := range []string{"limits", "limits-1", "setext"} {
		if !p.anchors[a] {
			t.Errorf("anchor %q missing from %v", a, p.anchors)
		}
	}
	if p.anchors["not-a-heading"] {
		t.Error("a fenced line made an anchor")
	}
	if len(p.links) != 1 || p.links[0].target != "real.md#Limits-1" {
		t.Errorf("links = %+v, want only real.md#Limits-1", p.links)
	}
}
