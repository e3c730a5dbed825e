// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {IERC20} from "@openzeppelin/contracts/token/ERC20/IERC20.sol";
import {SafeERC20} from "@openzeppelin/contracts/token/ERC20/utils/SafeERC20.sol";
import {Ownable} from "@openzeppelin/contracts/access/Ownable.sol";
import {MerkleProof} from "@openzeppelin/contracts/utils/cryptography/MerkleProof.sol";

/// @title One Merkle root per epoch over (account, cumulative amount); claims pay the difference.
/// @notice Leaves are OpenZeppelin StandardMerkleTree leaves of (address, uint256):
/// keccak256(bytes.concat(keccak256(abi.encode(account, cumulative)))). A claim may be sent by
/// anyone (so gas can be sponsored); the tokens always go to `account`.
contract CumulativeMerkleDistributor is Ownable {
    using SafeERC20 for IERC20;

    IERC20 public immutable token;
    bytes32 public merkleRoot;
    uint64 public epoch;
    // What each account claimed so far; the total is the sum of the Claimed events (no counter:
    // one storage write less per claim).
    mapping(address account => uint256) public claimed;

    event RootSet(uint64 indexed epoch, bytes32 root);
    event Claimed(address indexed account, uint256 amount, uint256 cumulative);

    error StaleEpoch(uint64 current, uint64 given);
    error InvalidProof();
    error NothingToClaim();

    constructor(IERC20 token_, address owner_) Ownable(owner_) {
        token = token_;
    }

    /// @notice Publish the root of `epoch_`; each epoch once, in increasing order.
    function setRoot(uint64 epoch_, bytes32 root) external onlyOwner {
        if (epoch_ <= epoch) revert StaleEpoch(epoch, epoch_);
        epoch = epoch_;
        merkleRoot = root;
        emit RootSet(epoch_, root);
    }

    /// @notice Pay `account` its `cumulative` amount less what it claimed before.
    function claim(address account, uint256 cumulative, bytes32[] calldata proof) external {
        bytes32 leaf = keccak256(bytes.concat(keccak256(abi.encode(account, cumulative))));
        if (!MerkleProof.verifyCalldata(proof, merkleRoot, leaf)) revert InvalidProof();
        uint256 already = claimed[account];
        if (cumulative <= already) revert NothingToClaim();
        uint256 amount = cumulative - already;
        claimed[account] = cumulative;
        emit Claimed(account, amount, cumulative);
        token.safeTransfer(account, amount);
    }
}
