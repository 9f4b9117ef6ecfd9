module traintrace.example/tlogverify

go 1.24.0

require (
	github.com/transparency-dev/formats v0.1.0
	github.com/transparency-dev/merkle v0.0.2
	golang.org/x/mod v0.32.0
)
