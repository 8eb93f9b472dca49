#include "io/sigv4.h"

#include <gtest/gtest.h>

#include <string>

namespace ringloader {
namespace sigv4 {
namespace {

std::string HexOf(absl::string_view data) { return Hex(Sha256(data)); }

TEST(Sha256Test, NistVectors) {
  // FIPS 180-2 appendix B and the NIST CAVS short/long message examples.
  EXPECT_EQ(HexOf(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(HexOf("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(HexOf("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(HexOf(std::string(1000000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  EXPECT_EQ(kEmptyPayloadSha256, HexOf(""));
}

TEST(Sha256Test, PaddingEdges) {
  // 55, 56 and 64 bytes: the length fits the last block, needs another, and a full block.
  EXPECT_EQ(HexOf(std::string(55, 'a')),
            "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318");
  EXPECT_EQ(HexOf(std::string(56, 'a')),
            "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a");
  EXPECT_EQ(HexOf(std::string(64, 'a')),
            "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb");
}

TEST(HmacSha256Test, Rfc4231Vectors) {
  // Test cases 1, 2, 3 and 6 (a key longer than the block) of RFC 4231.
  EXPECT_EQ(Hex(HmacSha256(std::string(20, '\x0b'), "Hi There")),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  EXPECT_EQ(Hex(HmacSha256("Jefe", "what do ya want for nothing?")),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  EXPECT_EQ(Hex(HmacSha256(std::string(20, '\xaa'), std::string(50, '\xdd'))),
            "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe");
  EXPECT_EQ(Hex(HmacSha256(std::string(131, '\xaa'),
                           "Test Using Larger Than Block-Size Key - Hash Key First")),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
}

TEST(SigV4Test, AwsGetObjectExample) {
  // AWS's documented example ("Signature Calculations for the Authorization Header: Transferring
  // Payload in a Single Chunk", GET Object): bytes 0-9 of examplebucket/test.txt.
  Request request;
  request.host = "examplebucket.s3.amazonaws.com";
  request.path = "/test.txt";
  request.headers = {{"range", "bytes=0-9"}};
  request.amz_date = "20130524T000000Z";
  Credentials credentials;
  credentials.access_key = "AKIAIOSFODNN7EXAMPLE";
  credentials.secret_key = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";
  credentials.region = "us-east-1";
  const Signed s = SignGet(request, credentials);
  EXPECT_EQ(s.canonical_request,
            "GET\n/test.txt\n\nhost:examplebucket.s3.amazonaws.com\nrange:bytes=0-9\n"
            "x-amz-content-sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\n"
            "x-amz-date:20130524T000000Z\n\nhost;range;x-amz-content-sha256;x-amz-date\n"
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(s.string_to_sign,
            "AWS4-HMAC-SHA256\n20130524T000000Z\n20130524/us-east-1/s3/aws4_request\n"
            "7344ae5b7ee6c3e7e6b0fe0640412a37625d1fbfff95c48bbb2dc43964946972");
  EXPECT_EQ(s.signature, "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
  ASSERT_EQ(s.headers.size(), 3u);
  EXPECT_EQ(s.headers[2],
            "Authorization: AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/"
            "s3/aws4_request, SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, "
            "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
}

TEST(SigV4Test, SessionTokenIsSignedAndSent) {
  Request request;
  request.host = "127.0.0.1:9000";
  request.path = "/bkt/k.tar";
  request.amz_date = "20240101T120000Z";
  Credentials credentials{"AKIDEXAMPLE", "secret", "TOKEN/with+chars", "eu-west-1"};
  const Signed s = SignGet(request, credentials);
  EXPECT_NE(s.canonical_request.find("x-amz-security-token:TOKEN/with+chars\n"), std::string::npos);
  EXPECT_NE(s.canonical_request.find("\nhost;x-amz-content-sha256;x-amz-date;x-amz-security-token\n"),
            std::string::npos);
  EXPECT_NE(s.string_to_sign.find("20240101/eu-west-1/s3/aws4_request"), std::string::npos);
  EXPECT_EQ(s.headers[2], "x-amz-security-token: TOKEN/with+chars");
  // Another region or token signs differently.
  Credentials other = credentials;
  other.region = "us-east-1";
  EXPECT_NE(SignGet(request, other).signature, s.signature);
  other = credentials;
  other.session_token = "TOKEN2";
  EXPECT_NE(SignGet(request, other).signature, s.signature);
}

TEST(SigV4Test, CanonicalUriEncodesOnce) {
  EXPECT_EQ(CanonicalUri("/bkt/a/train-000.tar"), "/bkt/a/train-000.tar");
  EXPECT_EQ(CanonicalUri("/bkt/a b=c+d.tar"), "/bkt/a%20b%3Dc%2Bd.tar");
  // Sent encoded: the server decodes it, and so does the signer before encoding once.
  EXPECT_EQ(CanonicalUri("/bkt/a%20b%3dc.tar"), "/bkt/a%20b%3Dc.tar");
  EXPECT_EQ(CanonicalUri("/bkt/~x_y-z.tar"), "/bkt/~x_y-z.tar");
  EXPECT_EQ(CanonicalUri(""), "/");
}

TEST(SigV4Test, AmzDateIsUtc) {
  EXPECT_EQ(AmzDate(1369353600), "20130524T000000Z");
  EXPECT_EQ(AmzDate(1704110400 + 3661), "20240101T130101Z");
}

}  // namespace
}  // namespace sigv4
}  // namespace ringloader
