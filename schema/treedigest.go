package schema

import "os"

// TreeDigest is the digest Load gives the skill package at rel under root
// (Skill.Digest): SHA-256 over each file's path below rel, size and
// SHA-256, in path order. Symbolic links and devices are refused, as when
// loading. Apply checks with it that the package it installs on the host
// is the one the plan named.
func TreeDigest(root *os.Root, rel string) (string, error) {
	var in Inputs
	return walkTree(root, rel, &in)
}
