//! Admin commands: accounts, keys, deposits and payouts; accounts' tax details (finance and
//! admin). An account is named by id or by name (resolved through `GET /v1/admin/accounts`,
//! which only admin keys read). A transfer always carries an
//! `Idempotency-Key` (the API requires one: it names the transfer); without
//! `--idempotency-key` a fresh one is made and printed, so an unclear failure can be retried
//! without moving money twice (docs/api.md §1.6).

use crate::cli::{AccountCmd, KeyCmd, RoleArg, TaxDetailsArgs, TaxDetailsCmd, TransferArgs};
use crate::error::CliError;
use crate::output::{human, note};
use crate::run::Ctx;
use gpux_client::Client;
use gpux_wire::{CreateAccountRequest, Role, TaxDetailsRequest};

/// Which transfer.
#[derive(Clone, Copy, Debug)]
pub enum Transfer {
    /// To a buyer's prepaid balance.
    Deposit,
    /// From a supplier's payable.
    Payout,
}

fn role(r: RoleArg) -> Role {
    match r {
        RoleArg::Supplier => Role::Supplier,
        RoleArg::Buyer => Role::Buyer,
        RoleArg::Finance => Role::Finance,
        RoleArg::Admin => Role::Admin,
    }
}

/// The id of an account given by id or name.
async fn account_id(c: &Client, account: &str) -> Result<String, CliError> {
    if gpux_wire::parse_id(account).is_some() {
        return Ok(account.to_string());
    }
    let all = c.accounts().await?.accounts;
    all.into_iter()
        .find(|a| a.name == account)
        .map(|a| a.id)
        .ok_or_else(|| CliError::Refused(format!("no account named {account:?} (gpux accounts)")))
}

/// `gpux account create` / `gpux account tax-details set`.
pub async fn account(ctx: &Ctx, cmd: AccountCmd) -> Result<(), CliError> {
    let (name, r) = match cmd {
        AccountCmd::Create { name, role } => (name, role),
        AccountCmd::TaxDetails(TaxDetailsCmd::Set(a)) => return tax_details(ctx, a).await,
    };
    let c = ctx.client()?;
    let a = c
        .create_account(&CreateAccountRequest {
            name,
            role: role(r),
        })
        .await?;
    ctx.out.one(&a, |a| {
        format!(
            "account {} ({}, {}) created. Its API key (shown once, keep it):\n  {}\nkey id {}",
            a.account.id,
            a.account.name,
            a.account.role.as_str(),
            a.api_key,
            a.key_id
        )
    })
}

/// `gpux key create|revoke`.
pub async fn key(ctx: &Ctx, cmd: KeyCmd) -> Result<(), CliError> {
    let c = ctx.client()?;
    match cmd {
        KeyCmd::Create { account } => {
            let id = account_id(&c, &account).await?;
            let k = c.create_key(&id).await?;
            ctx.out.one(&k, |k| {
                format!(
                    "new key for account {id} (shown once, keep it):\n  {}\nkey id {}",
                    k.api_key, k.key_id
                )
            })
        }
        KeyCmd::Revoke { account, key_id } => {
            let id = account_id(&c, &account).await?;
            let r = c.revoke_key(&id, &key_id).await?;
            ctx.out
                .one(&r, |r| format!("key {} of account {id} revoked", r.key_id))
        }
    }
}

/// `gpux deposit` / `gpux payout`.
pub async fn transfer(ctx: &Ctx, t: TransferArgs, kind: Transfer) -> Result<(), CliError> {
    let c = ctx.client()?;
    let id = account_id(&c, &t.account).await?;
    let key = match t.idempotency_key {
        Some(k) => k,
        None => {
            let k = format!("gpux-{}", uuid::Uuid::new_v4());
            note(format!(
                "idempotency key {k} (repeat with --idempotency-key {k} if this fails unclearly)"
            ));
            k
        }
    };
    let done = match kind {
        Transfer::Deposit => c.deposit(&id, t.amount, &key).await?,
        Transfer::Payout => c.payout(&id, t.amount, &key).await?,
    };
    ctx.out.one(&done, human::transfer)
}

/// `gpux account tax-details set`: the flags as the API's body (the server checks them and
/// names a bad field).
async fn tax_details(ctx: &Ctx, a: TaxDetailsArgs) -> Result<(), CliError> {
    let c = ctx.client()?;
    let id = account_id(&c, &a.account).await?;
    let body = TaxDetailsRequest {
        legal_name: a.legal_name,
        taxpayer_id: a.taxpayer_id,
        address: a.address,
        phone: a.phone,
        bank_name: a.bank_name,
        bank_account: a.bank_account,
    };
    let v = c.set_tax_details(&id, &body).await?;
    ctx.out.one(&v, human::tax_details)
}
