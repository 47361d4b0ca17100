import java.util.Enumeration;

import javax.jms.Connection;
import javax.jms.DeliveryMode;
import javax.jms.JMSException;
import javax.jms.MessageConsumer;
import javax.jms.MessageProducer;
import javax.jms.Queue;
import javax.jms.QueueBrowser;
import javax.jms.Session;

import org.apache.activemq.ActiveMQConnection;
import org.apache.activemq.ActiveMQConnectionFactory;
import org.apache.activemq.command.ActiveMQQueue;

/**
 * {@code ActiveMQConnection.destroyDestination} as Apache ActiveMQ Classic answers it (issue 22),
 * through the real ActiveMQ 5.x JMS client:
 *
 * <pre>
 *   java -cp $FERROMQ_JMS_CLASSPATH DestroyDestinationChecks --url tcp://127.0.0.1:61616
 * </pre>
 *
 * An idle queue holding messages is removed with them (a consumer of the same name afterwards
 * finds it empty); a queue with a consumer attached is refused with a JMSException saying
 * "Destination: queue://NAME still has an active subscription: ...", keeps its messages, and is removed once the
 * consumer is closed. Prints "ok destroy_destination" and exits 0, or "FAIL destroy_destination:
 * why" and exits 1.
 */
public final class DestroyDestinationChecks {
    static final long RECEIVE_MS = 10_000;
    static final long QUIET_MS = 1_000;

    public static void main(String[] args) throws Exception {
        String url = null;
        for (int i = 0; i + 1 < args.length; i++) {
            if (args[i].equals("--url")) {
                url = args[i + 1];
            }
        }
        if (url == null) {
            System.err.println("usage: DestroyDestinationChecks --url tcp://HOST:PORT");
            System.exit(2);
        }
        try {
            run(url);
            System.out.println("ok destroy_destination");
            System.exit(0);
        } catch (Throwable failure) {
            System.out.println("FAIL destroy_destination: " + failure);
            failure.printStackTrace(System.out);
            System.exit(1);
        }
    }

    static void ensure(boolean condition, String what) {
        if (!condition) {
            throw new AssertionError(what);
        }
    }

    static void send(Session session, Queue queue, int count) throws JMSException {
        MessageProducer producer = session.createProducer(queue);
        producer.setDeliveryMode(DeliveryMode.PERSISTENT);
        for (int i = 0; i < count; i++) {
            producer.send(session.createTextMessage("message " + i));
        }
        producer.close();
    }

    static int browse(Session session, Queue queue) throws JMSException {
        QueueBrowser browser = session.createBrowser(queue);
        int count = 0;
        for (Enumeration<?> messages = browser.getEnumeration(); messages.hasMoreElements(); ) {
            messages.nextElement();
            count++;
        }
        browser.close();
        return count;
    }

    static void run(String url) throws Exception {
        String suffix = Long.toString(System.nanoTime());
        ActiveMQConnection connection =
                (ActiveMQConnection) new ActiveMQConnectionFactory(url).createConnection();
        connection.start();
        try {
            Session session = connection.createSession(false, Session.AUTO_ACKNOWLEDGE);

            // An idle queue with messages: removed, and its messages with it.
            ActiveMQQueue idle = new ActiveMQQueue("destroy.idle." + suffix);
            send(session, idle, 3);
            ensure(browse(session, idle) == 3, "the idle queue holds its 3 messages before");
            connection.destroyDestination(idle);
            MessageConsumer late = session.createConsumer(idle);
            ensure(late.receive(QUIET_MS) == null,
                    "a consumer of the destroyed queue's name got one of its messages");
            late.close();
            connection.destroyDestination(idle);

            // A queue with a consumer: refused, and nothing lost.
            ActiveMQQueue busy = new ActiveMQQueue("destroy.busy." + suffix);
            Session other = connection.createSession(false, Session.CLIENT_ACKNOWLEDGE);
            MessageConsumer consumer = other.createConsumer(busy, "nothing = 'matches'");
            send(session, busy, 2);
            try {
                connection.destroyDestination(busy);
                throw new AssertionError("destroying a queue with a consumer was not refused");
            } catch (JMSException refused) {
                String message = String.valueOf(refused.getMessage());
                ensure(message.contains("still has an active subscription"),
                        "the refusal says why: " + message);
                ensure(message.contains("destroy.busy." + suffix),
                        "the refusal names the queue: " + message);
            }
            ensure(browse(session, busy) == 2, "the refused queue keeps its 2 messages");
            consumer.close();
            connection.destroyDestination(busy);
            MessageConsumer after = session.createConsumer(busy);
            ensure(after.receive(QUIET_MS) == null,
                    "the queue destroyed once its consumer closed kept a message");
            after.close();
            // Sending again creates it again, empty but for the new message.
            send(session, busy, 1);
            MessageConsumer again = session.createConsumer(busy);
            ensure(again.receive(RECEIVE_MS) != null, "the recreated queue delivers");
            ensure(again.receive(QUIET_MS) == null, "the recreated queue holds only the new message");
            again.close();
            connection.destroyDestination(busy);
        } finally {
            connection.close();
        }
    }
}
