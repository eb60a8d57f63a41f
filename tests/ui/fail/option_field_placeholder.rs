use distlock::read_lock;

struct User {
    email: Option<String>,
}

// Field paths are checked the same way as parameters.
#[read_lock(key = "mail:<user.email>")]
async fn send(user: &User) -> Result<(), distlock::Error> {
    let _ = &user.email;
    Ok(())
}

fn main() {}
