// Command tlogverify checks traintrace's transparency-log artefacts with the Go ecosystem's own
// libraries, as an outside auditor would (issue 28): nothing here is traintrace's code.
//
//   - golang.org/x/mod/sumdb/note opens the signed checkpoint with the log's verifier key;
//   - github.com/transparency-dev/formats/log parses it as a C2SP tlog-checkpoint;
//   - github.com/transparency-dev/formats/note verifies witness cosignatures (cosignature/v1);
//   - github.com/transparency-dev/merkle/proof checks an RFC 6962 inclusion proof against it.
//
// Usage:
//
//	tlogverify -log-key VKEY [-origin O] [-witness VKEY]... [-quorum N] CHECKPOINT_FILE
//	tlogverify -log-key VKEY [-origin O] [-witness VKEY]... [-quorum N] -bundle BUNDLE.json
//
// A bundle is JSON with "checkpoint" (the signed note), "leaf_hash" or "leaf" (hex),
// "leaf_index" and "inclusion_proof" (hex hashes). It prints one line: "OK ..." and exits 0, or
// the reason and exits 1.
package main

import (
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/transparency-dev/formats/log"
	fnote "github.com/transparency-dev/formats/note"
	"github.com/transparency-dev/merkle/proof"
	"github.com/transparency-dev/merkle/rfc6962"
	"golang.org/x/mod/sumdb/note"
)

type multi []string

func (m *multi) String() string     { return strings.Join(*m, ",") }
func (m *multi) Set(v string) error { *m = append(*m, v); return nil }

type bundle struct {
	Checkpoint     string   `json:"checkpoint"`
	Leaf           string   `json:"leaf"`
	LeafHash       string   `json:"leaf_hash"`
	LeafIndex      *uint64  `json:"leaf_index"`
	InclusionProof []string `json:"inclusion_proof"`
}

func fail(format string, a ...any) {
	fmt.Printf("FAIL "+format+"\n", a...)
	os.Exit(1)
}

func main() {
	logKey := flag.String("log-key", "", "the log's verifier key (name+hash+base64)")
	origin := flag.String("origin", "", "the checkpoint's expected origin [default: the log key's name]")
	bundlePath := flag.String("bundle", "", "a proof bundle (JSON) instead of a checkpoint file")
	quorum := flag.Int("quorum", 0, "cosignatures required from the -witness keys")
	var witnesses multi
	flag.Var(&witnesses, "witness", "a witness's cosignature verifier key (repeatable)")
	flag.Parse()

	var b bundle
	switch {
	case *bundlePath != "":
		raw, err := os.ReadFile(*bundlePath)
		if err != nil {
			fail("%v", err)
		}
		if err := json.Unmarshal(raw, &b); err != nil {
			fail("bundle %s: %v", *bundlePath, err)
		}
	case flag.NArg() == 1:
		raw, err := os.ReadFile(flag.Arg(0))
		if err != nil {
			fail("%v", err)
		}
		b.Checkpoint = string(raw)
	default:
		fail("give a checkpoint file or -bundle")
	}

	logV, err := note.NewVerifier(*logKey)
	if err != nil {
		fail("log key: %v", err)
	}
	var wvs []note.Verifier
	for _, k := range witnesses {
		v, err := fnote.NewVerifierForCosignatureV1(k)
		if err != nil {
			fail("witness key %q: %v", k, err)
		}
		wvs = append(wvs, v)
	}
	want := *origin
	if want == "" {
		want = logV.Name()
	}
	cp, _, n, err := log.ParseCheckpoint([]byte(b.Checkpoint), want, logV, wvs...)
	if err != nil {
		fail("checkpoint: %v", err)
	}
	cosigned := map[string]bool{}
	for _, s := range n.Sigs {
		for _, w := range wvs {
			if s.Name == w.Name() && s.Hash == w.KeyHash() {
				cosigned[fmt.Sprintf("%s+%08x", s.Name, s.Hash)] = true
			}
		}
	}
	if len(cosigned) < *quorum {
		fail("checkpoint: %d valid cosignature(s) of the %d required", len(cosigned), *quorum)
	}
	msg := fmt.Sprintf("OK checkpoint %s size %d, %d cosignature(s)", cp.Origin, cp.Size, len(cosigned))

	if b.LeafIndex != nil {
		var leafHash []byte
		switch {
		case b.LeafHash != "":
			leafHash, err = hex.DecodeString(b.LeafHash)
		case b.Leaf != "":
			var leaf []byte
			leaf, err = hex.DecodeString(b.Leaf)
			leafHash = rfc6962.DefaultHasher.HashLeaf(leaf)
		default:
			fail("bundle: leaf_index without leaf or leaf_hash")
		}
		if err != nil {
			fail("bundle leaf: %v", err)
		}
		path := make([][]byte, 0, len(b.InclusionProof))
		for i, h := range b.InclusionProof {
			x, err := hex.DecodeString(h)
			if err != nil {
				fail("inclusion_proof[%d]: %v", i, err)
			}
			path = append(path, x)
		}
		if err := proof.VerifyInclusion(rfc6962.DefaultHasher, *b.LeafIndex, cp.Size, leafHash, path, cp.Hash); err != nil {
			fail("inclusion of leaf %d in size %d: %v", *b.LeafIndex, cp.Size, err)
		}
		msg += fmt.Sprintf(", leaf %d included", *b.LeafIndex)
	}
	fmt.Println(msg)
}
