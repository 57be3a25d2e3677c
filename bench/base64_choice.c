/*
** Why host/common/base64.c is hand-written: this compares it with the
** packaged base64 codecs on a 64 MiB buffer and shows how each treats bad
** input. Not part of the build (it needs libb64-dev, libssl-dev and
** libsodium-dev only to compare):
**   gcc -O2 -I host/common bench/base64_choice.c host/common/base64.c \
**       -lb64 -lcrypto -lsodium -o /tmp/base64_choice && /tmp/base64_choice
*/
#include "base64.h"
#include <b64/cdecode.h>
#include <b64/cencode.h>
#include <openssl/evp.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec/1e9;}
int main(void){
  size_t N=64u<<20; unsigned char*src=malloc(N); char*enc=malloc(N*2); unsigned char*dec=malloc(N*2);
  for(size_t i=0;i<N;i++)src[i]=(unsigned char)(i*131);
  size_t el=b64_encode(src,N,enc), dl; 
  for(int rep=0;rep<3;rep++){
  double t0=now(); b64_encode(src,N,enc); double t1=now(); b64_decode(enc,el,dec,&dl); double t2=now();
  printf("ours     enc %5.0f dec %5.0f MB/s\n",N/(t1-t0)/1e6,N/(t2-t1)/1e6);
  t0=now(); EVP_EncodeBlock((unsigned char*)enc,src,(int)N); t1=now(); EVP_DecodeBlock(dec,(unsigned char*)enc,(int)el); t2=now();
  printf("openssl  enc %5.0f dec %5.0f MB/s\n",N/(t1-t0)/1e6,N/(t2-t1)/1e6);
  t0=now(); sodium_bin2base64(enc,N*2,src,N,sodium_base64_VARIANT_ORIGINAL); t1=now(); sodium_base642bin(dec,N*2,enc,el,NULL,&dl,NULL,sodium_base64_VARIANT_ORIGINAL); t2=now();
  printf("sodium   enc %5.0f dec %5.0f MB/s\n",N/(t1-t0)/1e6,N/(t2-t1)/1e6);
  base64_encodestate es; base64_decodestate ds; t0=now(); base64_init_encodestate(&es); int c=base64_encode_block((char*)src,(int)N,enc,&es); base64_encode_blockend(enc+c,&es); t1=now(); base64_init_decodestate(&ds); base64_decode_block(enc,(int)el,(char*)dec,&ds); t2=now();
  printf("libb64   enc %5.0f dec %5.0f MB/s\n",N/(t1-t0)/1e6,N/(t2-t1)/1e6);
  }
  /* what streaming does: one 256 KiB event at a time, in cache (N/256K events) */
  for(int rep=0;rep<3;rep++){
  double t0=now(); for(size_t o=0;o+262144<=N;o+=262144) b64_encode(src+o,262144,enc); double t1=now();
  for(size_t o=0;o+262144<=N;o+=262144) EVP_EncodeBlock((unsigned char*)enc,src+o,262144);
  double t2=now();
  printf("256 KiB events: ours enc %5.0f, openssl enc %5.0f MB/s\n",N/(t1-t0)/1e6,N/(t2-t1)/1e6);
  }
  /* validation behaviour */
  unsigned char o[16]; size_t ol; const char*bad="Zm9v!mFy";
  printf("ours bad -> %d\n", b64_decode(bad,8,o,&ol));
  printf("openssl bad -> %d ; 'Zg==' -> %d bytes\n", EVP_DecodeBlock(o,(const unsigned char*)bad,8), EVP_DecodeBlock(o,(const unsigned char*)"Zg==",4));
  base64_decodestate ds2; base64_init_decodestate(&ds2); printf("libb64 bad -> %d bytes (no error)\n", base64_decode_block(bad,8,(char*)o,&ds2));
  return 0;}
