package raftnode

import (
	"bytes"
	"testing"
)

// FuzzDecodeChunk: the snapshot chunk decoder never panics on garbage (a
// chunk arrives from the network), a decoded chunk re-encodes to bytes that
// decode to the same pairs, and encoding then decoding is the identity.
func FuzzDecodeChunk(f *testing.F) {
	f.Add([]byte{})
	f.Add(encodeChunk([]KV{{Key: []byte("k"), Value: []byte("v")}}))
	f.Add(encodeChunk([]KV{{Key: []byte("a"), Value: nil}, {Key: nil, Value: []byte("b")}}))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}) // length overflow
	f.Add([]byte{0x05, 'a'})                                                  // truncated key
	f.Add([]byte{0x80, 0x00, 0x00})                                           // non-minimal varint
	f.Fuzz(func(t *testing.T, b []byte) {
		kvs, err := decodeChunk(b)
		if err == nil {
			again, err := decodeChunk(encodeChunk(kvs))
			if err != nil {
				t.Fatalf("re-encoded chunk does not decode: %v", err)
			}
			if !sameKVs(kvs, again) {
				t.Fatalf("decode(encode(decode(b))) != decode(b)")
			}
		}
		// b read as key/value material: encoding is lossless
		var in []KV
		for i := 0; i+1 < len(b); i += 2 {
			n, m := int(b[i])%8, int(b[i+1])%8
			if i+2+n+m > len(b) {
				break
			}
			in = append(in, KV{Key: b[i+2 : i+2+n], Value: b[i+2+n : i+2+n+m]})
			i += n + m
		}
		out, err := decodeChunk(encodeChunk(in))
		if err != nil || !sameKVs(in, out) {
			t.Fatalf("encode/decode round trip of %d pairs: %v", len(in), err)
		}
	})
}

func sameKVs(a, b []KV) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !bytes.Equal(a[i].Key, b[i].Key) || !bytes.Equal(a[i].Value, b[i].Value) {
			return false
		}
	}
	return true
}
