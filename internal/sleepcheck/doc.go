// Package sleepcheck holds the repository-wide check that no test sleeps
// to order events: every time.Sleep in a _test.go file is listed, with
// its reason, in testdata/sleep-allowlist.txt (see sleepcheck_test.go).
package sleepcheck
