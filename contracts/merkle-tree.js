// The reference: @openzeppelin/merkle-tree's StandardMerkleTree of the (address, uint256) values
// read as JSON from stdin; prints {root, proofs, dump} (tests compare the Python tree with it).
"use strict";
const { StandardMerkleTree } = require("@openzeppelin/merkle-tree");

let input = "";
process.stdin.on("data", (chunk) => (input += chunk));
process.stdin.on("end", () => {
  const values = JSON.parse(input);
  const tree = StandardMerkleTree.of(values, ["address", "uint256"]);
  const proofs = values.map((_, i) => tree.getProof(i));
  process.stdout.write(JSON.stringify({ root: tree.root, proofs, dump: tree.dump() }));
});
